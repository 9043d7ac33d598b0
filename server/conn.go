package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Connection bounds. Headers must arrive within headerTimeout; a body at MinUploadRate after
// uploadGrace (pacedBody), and whole by uploadGrace plus its declared length at MinUploadRate
// (bodyDeadline: this also bounds what the server reads of a body no handler read); an answer
// within writeBase plus its bytes at MinUploadRate (a long poll within writeBase plus
// PollHold; a synchronous edit's wait for its Task is not counted). Idle keep-alive
// connections close after IdleTimeout.
//
// Slow clients cannot take every connection (connGuard). A request with a body (an upload)
// holds an upload slot from its headers to its answer: uploads may hold three quarters of
// MaxConns and those of one client address a quarter, so requests without a body (/health,
// /ready, polls) always have a quarter of the connections, and an address's uploads leave
// room for its other requests. An upload past either limit is refused (429 too_many_uploads)
// before its body is read, refuseDelay late (parked): a client that comes straight back then
// comes back that much later, instead of keeping the server busy refusing it.
//
// MaxConns counts the connections being served, idle, or waiting for a request for
// freshGrace or longer: a fresh one is read before it is judged. Past it, one no handler runs
// on is closed to make room: of the address that holds the most connections (a client that
// floods closes its own first), an idle one (it has had its answers), else the one that has
// waited longest; the new one if there is none. Parked connections and those closing after
// their answer (Go's server lingers on one whose body it did not read) are counted apart,
// MaxConns of each: past that no refusal is parked, and the oldest closing one is closed.
const (
	headerTimeout  = 10 * time.Second
	writeBase      = 30 * time.Second
	maxHeaderBytes = 64 << 10
	paceChunk      = 32 << 10 // a body's next this many bytes are due at MinUploadRate
)

// uploadGrace is how long a body may take before MinUploadRate applies (a var: tests shorten it).
var uploadGrace = 10 * time.Second

// refuseDelay is how long a refused upload waits for its answer: as long as Go's server
// lingers on a connection whose body it did not read.
const refuseDelay = 500 * time.Millisecond

// freshGrace is how long a connection waiting for its request is not counted against
// MaxConns, so that one arriving in a burst of others (as those a stalled process accepts at
// once when it runs again) gets to be read: a request's first bytes come with its connection.
// Short, so that a flood of connections that send nothing gains little by it.
const freshGrace = 10 * time.Millisecond

// flushGrace is how long a connection closing after its answer is kept whatever comes: its
// handler has ended, but Go's server may not have sent all of the answer yet.
const flushGrace = 100 * time.Millisecond

// connKey holds a request's net.Conn in its context (HTTPServer's ConnContext).
const connKey ctxKey = 1

// HTTPServer is an http.Server for s.Handler() with the bounds above; the caller sets Addr or
// calls Serve.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: headerTimeout,
		WriteTimeout:      writeBase + s.cfg.PollHold,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         s.conns.track,
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey, c) },
	}
}

// withConnBounds runs next with the request's connection marked as served (connGuard closes
// none that is) and, for a request with a body, its body due by bodyDeadline and an upload
// slot held: without a slot it answers 429 too_many_uploads before the body is read.
func (s *Server) withConnBounds(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey).(net.Conn)
		s.conns.serve(c, true)
		defer s.conns.serve(c, false)
		if r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		_ = http.NewResponseController(w).SetReadDeadline(s.bodyDeadline(r, time.Now(), s.cfg.MaxBodyBytes))
		addr := host(r.RemoteAddr)
		if e := s.conns.takeUpload(addr); e != nil {
			if s.conns.park(c) {
				time.Sleep(refuseDelay)
			}
			s.rejectAtMost(w, r, r.Method+" "+excerpt(r.URL.Path), "", e, &s.crowded)
			return
		}
		defer s.conns.releaseUpload(addr)
		next.ServeHTTP(w, r)
	})
}

// rateTime is how long n bytes take at rate bytes a second.
func rateTime(n, rate int64) time.Duration {
	return time.Duration(float64(n) / float64(rate) * float64(time.Second))
}

// writeTime is how long an answer of n bytes may take to write.
func (s *Server) writeTime(n int64) time.Duration {
	return writeBase + rateTime(n, s.cfg.MinUploadRate)
}

// bodyDeadline is when r's body, read from start, must be in: after uploadGrace and its
// declared length (at most limit; a chunked body: limit) at MinUploadRate, when a body that
// keeps pacedBody's pace is in.
func (s *Server) bodyDeadline(r *http.Request, start time.Time, limit int64) time.Time {
	if r.ContentLength >= 0 {
		limit = min(limit, r.ContentLength)
	}
	return start.Add(uploadGrace + rateTime(limit, s.cfg.MinUploadRate))
}

// paceBody is r.Body held to MinUploadRate: its next paceChunk bytes are due by the time the
// rate allows from the request's start, after uploadGrace, and all of it (at most limit bytes)
// by bodyDeadline; a body that falls behind fails with a timeout (408 request_timeout).
func (s *Server) paceBody(w http.ResponseWriter, r *http.Request, limit int64) *pacedBody {
	start := time.Now()
	return &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), start: start,
		end: s.bodyDeadline(r, start, limit), rate: s.cfg.MinUploadRate}
}

type pacedBody struct {
	io.ReadCloser
	rc         *http.ResponseController
	start, end time.Time
	n          int64
	rate       int64
}

func (p *pacedBody) Read(b []byte) (int, error) {
	due := p.start.Add(uploadGrace + rateTime(p.n+paceChunk, p.rate))
	if due.After(p.end) {
		due = p.end
	}
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

// connGuard holds client connections and upload slots to the Connection bounds above.
type connGuard struct {
	maxConns, maxUploads, maxAddrUploads int

	mu      sync.Mutex
	conns   map[net.Conn]*connInfo
	addrs   map[string]*addrUse
	phases  [phases]int // conns in each phase
	uploads int
}

type connInfo struct {
	addr  string
	phase phase
	since time.Time // of its last change: the oldest is closed first
}

// phase is what a connection is doing.
type phase int

const (
	waiting  phase = iota // for a request: it has sent nothing yet, or part of its headers
	idle                  // between requests
	serving               // a handler runs on it
	parked                // a refused upload waiting refuseDelay for its answer
	answered              // its handler has ended, and it has not gone idle: it is closing
	phases
)

// addrUse is what one client address holds.
type addrUse struct{ conns, uploads int }

func newConnGuard(maxConns int) *connGuard {
	return &connGuard{
		maxConns:   maxConns,
		maxUploads: max(1, maxConns*3/4), maxAddrUploads: max(1, maxConns/4),
		conns: map[net.Conn]*connInfo{}, addrs: map[string]*addrUse{},
	}
}

func (g *connGuard) track(c net.Conn, state http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	info := g.conns[c]
	switch {
	case state == http.StateNew:
		info = &connInfo{addr: host(c.RemoteAddr().String()), phase: waiting}
		g.conns[c] = info
		g.use(info.addr).conns++
		g.phases[waiting]++
	case info == nil: // closed to make room already
		return
	case state == http.StateClosed || state == http.StateHijacked:
		g.forget(c)
		return
	}
	p := waiting
	if state == http.StateIdle {
		p = idle
	}
	g.set(info, p)
	if state == http.StateNew || state == http.StateIdle {
		g.makeRoom(c, state == http.StateNew)
	}
}

// makeRoom closes a connection when MaxConns are counted: one that is idle or has waited
// freshGrace, else c itself if it is new. It runs when one starts to count: on arrival, when
// it goes idle or is served. Call with g.mu held.
func (g *connGuard) makeRoom(c net.Conn, isNew bool) {
	if g.phases[waiting]+g.phases[idle]+g.phases[serving] <= g.maxConns {
		return
	}
	now := time.Now() // the fresh ones are not counted
	stale := func(i *connInfo) bool { return i.phase == idle || i.phase == waiting && now.Sub(i.since) >= freshGrace }
	counted := g.phases[serving]
	for _, i := range g.conns {
		if stale(i) {
			counted++
		}
	}
	if counted <= g.maxConns {
		return
	}
	if victim := g.first(c, stale); victim != nil {
		g.evict(victim)
	} else if isNew {
		g.evict(c)
	}
}

// serve marks c as served by a handler, or answered (nil: a connection not tracked): closing,
// unless it goes idle next.
func (g *connGuard) serve(c net.Conn, on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	info := g.conns[c]
	if info == nil {
		return
	}
	p := answered
	if on {
		p = serving
	}
	g.set(info, p)
	if on {
		g.makeRoom(c, false)
	}
	if g.phases[answered] > g.maxConns {
		now := time.Now()
		if victim := g.first(c, func(i *connInfo) bool { return i.phase == answered && now.Sub(i.since) >= flushGrace }); victim != nil {
			g.evict(victim)
		}
	}
}

// park moves c, served, to parked, unless maxConns are parked already.
func (g *connGuard) park(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	info := g.conns[c]
	if info == nil || g.phases[parked] >= g.maxConns {
		return false
	}
	g.set(info, parked)
	return true
}

// first is the connection other than c to close first among those eligible, nil if none: of
// the address that holds the most, an idle one before the rest, the oldest first.
func (g *connGuard) first(c net.Conn, eligible func(*connInfo) bool) net.Conn {
	var victim net.Conn
	var best *connInfo
	for o, info := range g.conns {
		if o == c || !eligible(info) {
			continue
		}
		if best == nil || g.before(info, best) {
			victim, best = o, info
		}
	}
	return victim
}

// before says whether a is to be closed before b. Call with g.mu held.
func (g *connGuard) before(a, b *connInfo) bool {
	if na, nb := g.addrs[a.addr].conns, g.addrs[b.addr].conns; na != nb {
		return na > nb
	}
	if ia, ib := a.phase == idle, b.phase == idle; ia != ib {
		return ia
	}
	return a.since.Before(b.since)
}

// set moves info to phase p. Call with g.mu held.
func (g *connGuard) set(info *connInfo, p phase) {
	g.phases[info.phase]--
	g.phases[p]++
	info.phase, info.since = p, time.Now()
}

// evict closes c. Call with g.mu held.
func (g *connGuard) evict(c net.Conn) {
	g.forget(c)
	c.Close()
}

// takeUpload takes an upload slot for addr, or refuses it by name.
func (g *connGuard) takeUpload(addr string) *apiError {
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.use(addr)
	switch {
	case u.uploads >= g.maxAddrUploads:
		return errf(http.StatusTooManyRequests, "too_many_uploads", "",
			"this client address has %d uploads in progress, the most one address may (a quarter of -max-conns %d); retry once one ends", u.uploads, g.maxConns)
	case g.uploads >= g.maxUploads:
		g.tidy(addr)
		return errf(http.StatusTooManyRequests, "too_many_uploads", "",
			"the server has %d uploads in progress, the most it takes (three quarters of -max-conns %d); retry once one ends", g.uploads, g.maxConns)
	}
	u.uploads++
	g.uploads++
	return nil
}

func (g *connGuard) releaseUpload(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.use(addr).uploads--
	g.uploads--
	g.tidy(addr)
}

// use is addr's entry, made if new; tidy removes it once it holds nothing. Call with g.mu held.
func (g *connGuard) use(addr string) *addrUse {
	u := g.addrs[addr]
	if u == nil {
		u = &addrUse{}
		g.addrs[addr] = u
	}
	return u
}

func (g *connGuard) tidy(addr string) {
	if u := g.addrs[addr]; u != nil && *u == (addrUse{}) {
		delete(g.addrs, addr)
	}
}

// forget stops tracking c. Call with g.mu held.
func (g *connGuard) forget(c net.Conn) {
	info := g.conns[c]
	g.phases[info.phase]--
	delete(g.conns, c)
	g.use(info.addr).conns--
	g.tidy(info.addr)
}

// host is addr's host, without its port.
func host(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
