package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// LedgerEntry is one line of the request ledger. Every accepted job gets exactly one terminal
// entry (completed, failed or cancelled); every rejected request, delete and expiry gets its
// own. The suite joins these to client records on request_id.
type LedgerEntry struct {
	Time          time.Time         `json:"time"`
	Event         string            `json:"event"` // job | rejected | delete | expire
	RequestID     string            `json:"request_id"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	Route         string            `json:"route"`
	Model         string            `json:"model,omitempty"`
	JobID         string            `json:"job_id,omitempty"`
	Lane          *int              `json:"lane,omitempty"`         // which of the model's lanes ran the job
	LaneDevices   string            `json:"lane_devices,omitempty"` // that lane's devices (CUDA ids), when the server names them
	Layout        spec.Layout       `json:"layout,omitempty"`       // the GPU layout the lane runs, for rows that offer one
	Status        string            `json:"status"`                 // completed | failed | cancelled | rejected | deleted | expired
	HTTPStatus    int               `json:"http_status,omitempty"`
	Error         *JobError         `json:"error,omitempty"`
	Settings      *spec.Settings    `json:"settings,omitempty"`
	Inputs        map[string]string `json:"inputs,omitempty"` // digests of what came in
	Output        *LedgerOutput     `json:"output,omitempty"`
	Actual        *spec.Actual      `json:"actual,omitempty"`
	Timing        *Timing           `json:"timing,omitempty"`
	FilesRemoved  []string          `json:"files_removed,omitempty"`
	Suppressed    int               `json:"suppressed,omitempty"` // of a 401 or a 429 too_many_uploads: refusals left unwritten before it (rate bound)
}

// LedgerOutput digests the artifact and the raw frames it was encoded from.
type LedgerOutput struct {
	SHA256       string  `json:"sha256"`
	Bytes        int64   `json:"bytes"`
	FramesSHA256 string  `json:"frames_sha256"`
	PeakMemoryMB float64 `json:"peak_memory_mb"`
}

// JobError is the error object of a failed job.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`

	badInput bool   // the request was at fault: an edit answers 400, not 500
	param    string // the field at fault
}

// Timing splits a job's time so client latency can be set against the Task alone. The parts
// of total_ms, in order: receive, queue, Task call (task_phases_ms splits it where the Task
// can), hand-over, wait for the encoder, encode, other.
type Timing struct {
	ReceiveMS      float64            `json:"receive_ms"`      // handler began -> job made: the body read, parsed and checked (an edit's reference's header)
	ReceiveBodyMS  float64            `json:"receive_body_ms"` // not a part: receive_ms up to the body's last byte, the client's upload as the server saw it
	QueueMS        float64            `json:"queue_ms"`        // waiting for a lane (an in-process edit: and for its reference's decode)
	TaskCallWallMS float64            `json:"task_call_wall_ms"`
	TaskPhasesMS   map[string]float64 `json:"task_phases_ms,omitempty"` // e.g. encode_prompt, denoise, decode, as the Task timed them
	HandoverMS     float64            `json:"handover_ms"`              // Task call returned -> frames in the server
	EncodeWaitMS   float64            `json:"encode_wait_ms"`           // behind the previous clip's encode
	EncodeMS       float64            `json:"encode_ms"`                // encoder, with the raw frames digested meanwhile
	OtherMS        float64            `json:"other_ms"`                 // the rest: checks, artifact digest, bookkeeping
	TotalMS        float64            `json:"total_ms"`                 // received -> completed, as the server saw it
	StreamedFrames int                `json:"streamed_frames"`          // not a part: frames that reached the encoder before the Task returned
}

// ledger writes LedgerEntry lines. Each line is one Write of a whole line; a write that fails
// leaves no partial line (a writer that can be truncated, as a file, is cut back to the last
// whole line; any other gets a newline first, so the fragment stands alone).
//
// While writes fail (a full disk) the ledger is down, and the server accepts no new job
// (Server.full): the line that failed and every later line owed to an accepted job (its
// terminal line, delete or expiry) wait in memory, at most maxWaiting bytes, and are written
// in order, each once, as soon as a write succeeds, tried again with every new line and every
// ledgerRetry. Refusals meanwhile are counted, not written: only an accepted job's lines are
// owed. Past limit bytes only the owed lines are written (the server accepts no new job then
// either).
type ledger struct {
	mu         sync.Mutex
	w          io.Writer
	log        *slog.Logger
	limit      int64
	maxWaiting int
	size       int64 // bytes of whole lines in w (a file's size when opened)
	broken     bool  // a fragment could not be cut: the next line starts on a new one
	dropped    int   // refusals not written past limit (logged once)

	down     atomic.Pointer[string] // why writes fail, while they do (read without mu)
	waiting  []waitingLine          // oldest first
	waitSize int                    // bytes of waiting
	lost     int                    // owed lines that did not fit maxWaiting: never written
	skipped  int                    // refusals not written while down
	retrying bool
	closed   bool
	stop     chan struct{} // closed by close: the retries end
	retries  sync.WaitGroup
}

type waitingLine struct {
	b    []byte
	owed bool
}

// ledgerRetry is how often a down ledger tries its waiting lines again, and the Retry-After
// of the jobs it refuses meanwhile.
const ledgerRetry = time.Second

// maxWaitingBytes bounds the lines a down ledger keeps: over a thousand accepted jobs' lines
// even with prompts of 32 KiB (a var: tests lower it).
var maxWaitingBytes = 32 << 20

func newLedger(w io.Writer, limit int64, log *slog.Logger) *ledger {
	l := &ledger{w: w, log: log, limit: limit, maxWaiting: maxWaitingBytes, stop: make(chan struct{})}
	if w == nil {
		l.w = io.Discard
	}
	if st, ok := w.(interface{ Stat() (os.FileInfo, error) }); ok {
		if fi, err := st.Stat(); err == nil && fi.Mode().IsRegular() {
			l.size = fi.Size()
		}
	}
	return l
}

// full says whether the ledger has reached its limit.
func (l *ledger) full() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size >= l.limit
}

// downBecause says why the ledger cannot write ("" while it can).
func (l *ledger) downBecause() string {
	if why := l.down.Load(); why != nil {
		return *why
	}
	return ""
}

// write writes e as one line. owed: the line is an accepted job's (its terminal line, delete
// or expiry), written whatever the limit, and kept while the ledger is down.
func (l *ledger) write(e LedgerEntry, owed bool) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		l.log.Error("ledger line not encodable", "err", err, "request_id", e.RequestID)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !owed && l.size+int64(buf.Len()) > l.limit {
		if l.dropped++; l.dropped == 1 {
			l.log.Error("ledger at its size limit: refusals are no longer written", "limit", l.limit)
		}
		return
	}
	if len(l.waiting) > 0 && !l.flush() {
		l.keep(buf.Bytes(), owed)
		return
	}
	if err := l.put(buf.Bytes()); err != nil {
		// A full disk must not take serving down, but it must not pass unnoticed either.
		l.log.Error("ledger write failed: no new job is accepted, and the lines owed to accepted jobs wait in memory, until a write succeeds",
			"err", err, "request_id", e.RequestID)
		l.keep(buf.Bytes(), owed)
		if !l.retrying && !l.closed {
			l.retrying = true
			l.retries.Add(1)
			go l.retry()
		}
	}
}

// put writes one line, leaving no partial line. Call with l.mu held.
func (l *ledger) put(line []byte) error {
	if l.broken {
		line = append([]byte{'\n'}, line...)
	}
	n, err := l.w.Write(line)
	if err == nil {
		l.size += int64(n)
		l.broken = false
		return nil
	}
	why := err.Error()
	if pe, ok := err.(*os.PathError); ok {
		why = pe.Err.Error() // the answers that quote it need not name the file
	}
	l.down.Store(&why)
	if n > 0 {
		t, ok := l.w.(interface{ Truncate(int64) error })
		l.broken = !ok || t.Truncate(l.size) != nil
	}
	return err
}

// keep adds a line that could not be written behind those waiting: the first whatever it is
// (the retries try it), a later one if it is owed and maxWaiting allows. Call with l.mu held.
func (l *ledger) keep(line []byte, owed bool) {
	switch {
	case len(l.waiting) == 0:
	case !owed:
		l.skipped++
		return
	case l.waitSize+len(line) > l.maxWaiting:
		if l.lost++; l.lost == 1 {
			l.log.Error("ledger down and its waiting lines at their bound: lines owed to accepted jobs are lost", "bound", l.maxWaiting)
		}
		return
	}
	l.waiting = append(l.waiting, waitingLine{bytes.Clone(line), owed})
	l.waitSize += len(line)
}

// flush writes the waiting lines in order and says whether it wrote them all; then the
// ledger is up again. Call with l.mu held.
func (l *ledger) flush() bool {
	late := len(l.waiting)
	for len(l.waiting) > 0 {
		if l.put(l.waiting[0].b) != nil {
			return false
		}
		l.waitSize -= len(l.waiting[0].b)
		l.waiting = l.waiting[1:]
	}
	l.down.Store(nil)
	l.log.Warn("the ledger writes again", "lines_written_late", late, "refusals_not_written", l.skipped, "owed_lines_lost", l.lost)
	l.waiting, l.skipped, l.lost = nil, 0, 0
	return true
}

// retry tries the waiting lines every ledgerRetry until they are written or the ledger closes.
func (l *ledger) retry() {
	defer l.retries.Done()
	t := time.NewTicker(ledgerRetry)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		up := len(l.waiting) == 0 || l.flush()
		l.retrying = !up
		l.mu.Unlock()
		if up {
			return
		}
	}
}

// close ends the retries, tries the waiting lines once more, and says how many lines of this
// outage were never written, if any.
func (l *ledger) close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.stop)
	}
	l.mu.Unlock()
	l.retries.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiting) == 0 || l.flush() {
		return nil
	}
	owed := l.lost
	for _, w := range l.waiting {
		if w.owed {
			owed++
		}
	}
	return fmt.Errorf("ledger: %d lines could not be written (%s), %d of them owed to accepted jobs (terminal, delete or expiry lines)",
		len(l.waiting)+l.lost+l.skipped, l.downBecause(), owed)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
