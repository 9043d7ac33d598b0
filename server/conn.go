package server

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Connection bounds. Headers must arrive within headerTimeout; a body at MinUploadRate after
// uploadGrace (pacedBody); an answer within writeBase plus its bytes at MinUploadRate (a long
// poll within writeBase plus PollHold; a synchronous edit's wait for its Task is not counted).
// Idle keep-alive connections close after IdleTimeout, and at MaxConns the oldest connection
// that is idle or has sent nothing yet is closed to make room (connGuard), so a flood of idle
// connections cannot keep /health from answering.
const (
	headerTimeout  = 10 * time.Second
	writeBase      = 30 * time.Second
	maxHeaderBytes = 64 << 10
	paceChunk      = 32 << 10 // a body's next this many bytes are due at MinUploadRate
)

// uploadGrace is how long a body may take before MinUploadRate applies (a var: tests shorten it).
var uploadGrace = 10 * time.Second

// HTTPServer is an http.Server for s.Handler() with the bounds above; the caller sets Addr or
// calls Serve.
func (s *Server) HTTPServer() *http.Server {
	g := &connGuard{max: s.cfg.MaxConns, conns: map[net.Conn]connInfo{}}
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: headerTimeout,
		WriteTimeout:      writeBase + s.cfg.PollHold,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         g.track,
	}
}

// writeTime is how long an answer of n bytes may take to write.
func (s *Server) writeTime(n int64) time.Duration {
	return writeBase + time.Duration(float64(n)/float64(s.cfg.MinUploadRate)*float64(time.Second))
}

// paceBody is r.Body held to MinUploadRate: its next paceChunk bytes are due by the time the
// rate allows from the request's start, after uploadGrace; a body that falls behind fails
// with a timeout (408 request_timeout).
func (s *Server) paceBody(w http.ResponseWriter, r *http.Request) *pacedBody {
	return &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), start: time.Now(), rate: s.cfg.MinUploadRate}
}

type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	n     int64
	rate  int64
}

func (p *pacedBody) Read(b []byte) (int, error) {
	due := p.start.Add(uploadGrace + time.Duration(float64(p.n+paceChunk)/float64(p.rate)*float64(time.Second)))
	_ = p.rc.SetReadDeadline(due)
	n, err := p.ReadCloser.Read(b)
	p.n += int64(n)
	return n, err
}

// done lifts the body's read deadline (a deadline left set would end the server's wait for
// the client to go away) and gives the answer writeTime(answer) from now.
func (p *pacedBody) done(s *Server, answer int64) {
	_ = p.rc.SetReadDeadline(time.Time{})
	_ = p.rc.SetWriteDeadline(time.Now().Add(s.writeTime(answer)))
}

// connGuard keeps at most max client connections open: when a new one would exceed it, the
// oldest idle connection is closed, else the oldest that has sent no request yet, else the
// new one.
type connGuard struct {
	mu    sync.Mutex
	max   int
	conns map[net.Conn]connInfo
}

type connInfo struct {
	state http.ConnState
	since time.Time
}

func (g *connGuard) track(c net.Conn, state http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch state {
	case http.StateClosed, http.StateHijacked:
		delete(g.conns, c)
		return
	case http.StateActive:
		g.conns[c] = connInfo{state, g.conns[c].since}
		return
	}
	g.conns[c] = connInfo{state, time.Now()}
	if state != http.StateNew || len(g.conns) <= g.max {
		return
	}
	// The oldest idle connection first (it has had its answers), else the oldest that has
	// sent nothing yet.
	var victim net.Conn
	var best connInfo
	for o, info := range g.conns {
		if o == c || info.state == http.StateActive {
			continue
		}
		better := victim == nil || (info.state == http.StateIdle) != (best.state == http.StateIdle) && info.state == http.StateIdle ||
			info.state == best.state && info.since.Before(best.since)
		if better {
			victim, best = o, info
		}
	}
	if victim == nil {
		victim = c
	}
	delete(g.conns, victim)
	victim.Close()
}
