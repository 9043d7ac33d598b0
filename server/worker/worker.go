// Package worker runs a native spec.Task out of process: one long-lived worker process per
// model lane, spoken to in JSON lines over stdin/stdout. The protocol is documented in
// docs/WORKER.md; it is deliberately small so that workers can be written in any language
// (the GPU families are Python diffusers adapters).
//
// A *Task starts the worker in Load (the model loads there, before the server reports ready),
// serializes jobs (one at a time per worker), passes each job's settings on stdin, receives
// progress, frames events and the result on stdout, and reads the frames the worker wrote as
// raw rgb24 to a scratch file: those a frames event announces at once, handed on to
// Request.Frames while the job runs, the rest at the result. Scratch files are removed on
// every path. A worker that dies is restarted before the next job; the job it was running
// fails with code "worker_crashed".
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// Error codes returned by Run and Load as *spec.Error (besides the codes a worker reports in
// its own "error" events, which are passed through unchanged).
const (
	CodeCrashed       = "worker_crashed"      // the worker died or closed stdout during the job
	CodeUnavailable   = "worker_unavailable"  // no worker could be (re)started for the job
	CodeBadOutput     = "bad_worker_output"   // the result line or raw frame file is inconsistent
	CodeFatal         = "worker_fatal"        // the worker sent {"event":"fatal"} while loading
	CodeExited        = "worker_exited"       // the worker exited before its ready line
	CodeLoadTimeout   = "worker_load_timeout" // no ready line within Config.LoadTimeout
	CodeStartFailed   = "worker_start_failed" // the worker command could not be started
	CodeScratch       = "worker_scratch"      // the scratch directory or a job file failed
	CodeWorkerGeneric = "worker_error"        // an error event without a code
)

const (
	defaultLoadTimeout = 10 * time.Minute
	defaultCancelGrace = 30 * time.Second
	defaultCloseGrace  = 5 * time.Second
	// restartBackoff: after a failed (re)start, Run reports worker_unavailable without trying
	// again until this much time has passed, so a broken worker is not reloaded per request.
	restartBackoff = 10 * time.Second
	// maxEagerRestarts: consecutive deaths (without a successful job between them) after
	// which the worker is no longer restarted as soon as it dies, only when a job needs it.
	maxEagerRestarts = 3
	maxLine          = 1 << 20 // longest protocol line accepted; longer lines are ignored
	stderrTailLines  = 20
	writeTimeout     = 10 * time.Second
)

// Config describes how to run one lane's worker.
type Config struct {
	Argv        []string      // worker command
	Env         []string      // extra environment, appended to os.Environ()
	ScratchDir  string        // per-job files (reference PNG, raw frames); created if missing; "" = a private temp dir
	Log         io.Writer     // worker stderr is copied here line by line, prefixed; nil = discard
	LoadTimeout time.Duration // how long to wait for the ready line (0 = 10 min)
}

// Task is a spec.Task (and spec.Loader, spec.Closer) backed by a worker process.
type Task struct {
	cfg Config
	log *logger

	runMu sync.Mutex // serializes Run: one job at a time per worker

	// A job's scratch files are removed in the background once Run returns: unlinking Wan2.1's
	// 20 MB of raw frames took 14-15 ms, which was in every job's hand-over. Close waits.
	removals removals
	remove   func(string) error // os.Remove; tests hold it back

	mu         sync.Mutex // guards everything below
	p          *proc      // current process (starting, ready, dead or failed); nil before Load
	closed     bool
	everReady  bool // some process has become ready: later starts count as restarts
	restarts   int
	parity     *spec.Parity // from the last ready line
	streak     int          // deaths since the last successful job
	seq        uint64
	scratch    string
	ownScratch bool

	// Tunables; tests shorten them.
	cancelGrace time.Duration
	closeGrace  time.Duration
}

var (
	_ spec.Task   = (*Task)(nil)
	_ spec.Loader = (*Task)(nil)
	_ spec.Closer = (*Task)(nil)
)

// New returns a Task for cfg. Nothing starts until Load (or the first Run).
func New(cfg Config) *Task {
	w := cfg.Log
	if w == nil {
		w = io.Discard
	}
	return &Task{
		cfg:         cfg,
		log:         &logger{w: w},
		remove:      os.Remove,
		cancelGrace: defaultCancelGrace,
		closeGrace:  defaultCloseGrace,
	}
}

// DecodesReferenceFile says that the worker reads an edit's reference from the upload itself
// (spec.Request.ReferenceFile, written to its scratch directory as it came): the server then
// decodes nothing for it.
func (t *Task) DecodesReferenceFile() bool { return true }

// Parity is the parity figures the worker's last ready line carried (nil before one, or from a
// family that checks none).
func (t *Task) Parity() *spec.Parity {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.parity
}

// Restarts reports how many times a worker process was started again after one had been
// ready (after a crash, a kill on cancel timeout, or a lost stdout), including attempts
// that failed.
func (t *Task) Restarts() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.restarts
}

// Load starts the worker and waits for its ready line. It returns nil at once when a worker
// is already ready. If ctx ends first, the starting worker is killed and ctx.Err() returned.
func (t *Task) Load(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return &spec.Error{Code: CodeUnavailable, Message: "worker task is closed"}
	}
	p := t.p
	if p == nil || p.failed() || p.isGone() {
		p = t.spawnLocked()
	}
	t.mu.Unlock()
	select {
	case <-p.readyCh:
		return p.startErr
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
}

// Close asks the worker to exit by closing its stdin, waits briefly, then kills its process
// group. A job in flight fails with worker_unavailable; later Runs fail the same way.
func (t *Task) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	p := t.p
	scratch, own := t.scratch, t.ownScratch
	t.mu.Unlock()

	var err error
	if p != nil && p.cmd != nil {
		p.closeStdin()
		if !p.isReady() {
			p.kill() // still loading (or failed): nothing to finish gracefully
		}
		if !waitFor(p.exited, t.closeGrace) {
			p.note("did not exit within %s of stdin closing; killing its process group", t.closeGrace)
			p.kill()
			if !waitFor(p.exited, 5*time.Second) {
				err = fmt.Errorf("worker pid %d did not exit after SIGKILL", p.pid)
			}
		}
		waitFor(p.stderrDone, time.Second)
		waitFor(p.eof, time.Second)
	}
	t.removals.wait()
	if own && scratch != "" {
		if rmErr := os.RemoveAll(scratch); rmErr != nil && err == nil {
			err = rmErr
		}
	}
	return err
}

// Run sends one job to the worker and waits for its result. See docs/WORKER.md.
func (t *Task) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if err := ctx.Err(); err != nil {
		return spec.Output{}, err
	}
	p, err := t.acquire(ctx)
	if err != nil {
		return spec.Output{}, err
	}
	dir, err := t.scratchDir()
	if err != nil {
		return spec.Output{}, &spec.Error{Code: CodeScratch, Message: err.Error()}
	}
	id := t.nextID()

	var files []string
	defer func() { t.removals.start(files, t.remove, p.note) }()

	line := runLine{Op: "run", ID: id, Settings: req.Settings}
	if len(req.ReferenceFile) > 0 {
		path, err := writeReference(dir, id, req.ReferenceFile)
		if path != "" {
			files = append(files, path)
		}
		if err != nil {
			return spec.Output{}, &spec.Error{Code: CodeScratch, Message: "writing the reference: " + err.Error()}
		}
		line.Reference = path
	}
	f, err := os.CreateTemp(dir, id+"-*.rgb")
	if err != nil {
		return spec.Output{}, &spec.Error{Code: CodeScratch, Message: "creating output file: " + err.Error()}
	}
	files = append(files, f.Name())
	f.Close()
	line.Output = f.Name()

	var j *job
	for attempt := 0; ; attempt++ {
		j = &job{id: id, ch: make(chan message, 64), done: make(chan struct{})}
		p.setJob(j)
		err := p.send(line)
		if err == nil {
			break
		}
		p.clearJob(j)
		p.note("sending job %s: %v", id, err)
		if attempt > 0 || !(errors.Is(err, syscall.EPIPE) || errors.Is(err, errStdinClosed)) {
			return spec.Output{}, t.crashed(p, id)
		}
		// Nothing holds the worker's stdin open: it died while idle, before it could read
		// this job. Restart it and send the job again (once).
		p.kill()
		waitFor(p.gone, 5*time.Second)
		if p, err = t.acquire(ctx); err != nil {
			return spec.Output{}, err
		}
	}
	defer func() { p.clearJob(j) }()
	st := newStream(id, line.Output, req.Settings)
	defer st.close()

	handle := func(m message) (bool, spec.Output, error) {
		switch m.Event {
		case "progress":
			if req.Progress != nil {
				req.Progress(m.Done, m.Total)
			}
			return false, spec.Output{}, nil
		case "frames":
			pix, err := st.announce(m)
			if err != nil {
				// The worker is still running the job: end it before the next one is sent.
				p.note("job %s: %v; cancelling it", id, err)
				if serr := p.send(cancelLine{Op: "cancel", ID: id}); serr != nil {
					p.note("sending cancel for job %s: %v", id, serr)
				}
				t.drainCancelled(p, j)
				return true, spec.Output{}, err
			}
			if req.Frames != nil {
				req.Frames(pix)
			}
			return false, spec.Output{}, nil
		case "result":
			out, err := t.collect(p, st, m)
			return true, out, err
		case "error":
			code := m.Code
			if code == "" {
				code = CodeWorkerGeneric
			}
			if m.Param == "reference" { // the upload did not decode: the request's fault
				return true, spec.Output{}, &spec.Error{Code: code, Message: "the reference image could not be read by the worker: " + m.Message, BadInput: true, Param: "image"}
			}
			return true, spec.Output{}, &spec.Error{Code: code, Message: m.Message}
		case badLine:
			return true, spec.Output{}, &spec.Error{Code: CodeBadOutput, Message: m.Message}
		}
		return false, spec.Output{}, nil
	}

	for {
		select {
		case m := <-j.ch:
			if final, out, err := handle(m); final {
				return out, err
			}
		case <-p.gone:
			// Take the job's last lines (the reader may still be passing them on) before
			// declaring the crash: a result written just before dying is still a result.
			p.kill()
			timer := time.NewTimer(2 * time.Second)
			for eof := false; !eof; {
				select {
				case m := <-j.ch:
					if final, out, err := handle(m); final {
						timer.Stop()
						return out, err
					}
				case <-p.eof:
					eof = true
				case <-timer.C:
					eof = true
				}
			}
			timer.Stop()
			for {
				select {
				case m := <-j.ch:
					if final, out, err := handle(m); final {
						return out, err
					}
					continue
				default:
				}
				break
			}
			return spec.Output{}, t.crashed(p, id)
		case <-ctx.Done():
			if err := p.send(cancelLine{Op: "cancel", ID: id}); err != nil {
				p.note("sending cancel for job %s: %v", id, err)
			}
			t.drainCancelled(p, j)
			return spec.Output{}, ctx.Err()
		}
	}
}

// drainCancelled waits, bounded by cancelGrace, for the cancelled job to end (with any event
// that ends it) so the next job cannot receive a stale result; past the bound the worker is
// killed and restarted.
func (t *Task) drainCancelled(p *proc, j *job) {
	timer := time.NewTimer(t.cancelGrace)
	defer timer.Stop()
	for {
		select {
		case m := <-j.ch:
			if m.Event == "result" || m.Event == "error" || m.Event == badLine {
				return
			}
		case <-p.gone:
			p.kill()
			waitFor(p.exited, 5*time.Second)
			return
		case <-timer.C:
			p.note("job %s still running %s after cancel; killing the worker", j.id, t.cancelGrace)
			p.kill()
			waitFor(p.exited, 5*time.Second)
			return
		}
	}
}

// crashed makes sure p's process group is gone and describes the death for the failed job.
// The watcher goroutine restarts the worker.
func (t *Task) crashed(p *proc, id string) error {
	waitFor(p.exited, 500*time.Millisecond) // let an exiting worker report its own status
	p.kill()
	waitFor(p.exited, 5*time.Second)
	waitFor(p.stderrDone, time.Second)
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return &spec.Error{Code: CodeUnavailable, Message: fmt.Sprintf("worker task was closed during job %s", id)}
	}
	return &spec.Error{Code: CodeCrashed, Message: fmt.Sprintf(
		"worker pid %d died during job %s: %s; last stderr lines: %s", p.pid, id, p.exitStatus(), p.tail.String())}
}

// collect turns a result line and the raw file into an Output.
func (t *Task) collect(p *proc, st *stream, m message) (spec.Output, error) {
	video, err := st.result(m)
	if err != nil {
		return spec.Output{}, err
	}
	out := spec.Output{
		Video:        &video,
		Actual:       m.Actual,
		TaskWall:     time.Duration(m.TaskWallMS * float64(time.Millisecond)),
		PeakMemoryMB: m.PeakMemoryMB,
		Phases:       m.PhasesMS,
	}
	if out.Actual.Precision == "" {
		out.Actual.Precision = p.precision
	}
	t.mu.Lock()
	t.streak = 0
	t.mu.Unlock()
	return out, nil
}

// acquire returns a ready process, starting one if there is none, the last one died, or the
// last start failed more than restartBackoff ago.
func (t *Task) acquire(ctx context.Context) (*proc, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, &spec.Error{Code: CodeUnavailable, Message: "worker task is closed"}
	}
	p := t.p
	switch {
	case p == nil:
		p = t.spawnLocked()
	case p.failed():
		if time.Since(p.failedAt) < restartBackoff {
			t.mu.Unlock()
			return nil, &spec.Error{Code: CodeUnavailable, Message: "worker failed to start: " + p.startErr.Error()}
		}
		p = t.spawnLocked()
	case p.isGone():
		p = t.spawnLocked()
	}
	t.mu.Unlock()
	select {
	case <-p.readyCh:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if p.startErr != nil {
		return nil, &spec.Error{Code: CodeUnavailable, Message: "worker failed to start: " + p.startErr.Error()}
	}
	return p, nil
}

// spawnLocked starts a new process and makes it current. t.mu must be held.
func (t *Task) spawnLocked() *proc {
	if t.everReady {
		t.restarts++
	}
	p := newProc(t)
	t.p = p
	if err := p.start(t.cfg); err != nil {
		p.closeAll()
		p.finishStart("", &spec.Error{Code: CodeStartFailed, Message: err.Error()})
		t.log.printf("worker: cannot start %q: %v", t.cfg.Argv, err)
		return p
	}
	go p.readStdout()
	go p.readStderr()
	go t.awaitReady(p)
	go t.watch(p)
	return p
}

// awaitReady ends p's start: on its ready or fatal line, its death, or the load timeout.
func (t *Task) awaitReady(p *proc) {
	d := t.cfg.LoadTimeout
	if d <= 0 {
		d = defaultLoadTimeout
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.readyCh:
	case <-p.gone:
		waitFor(p.eof, time.Second) // a fatal line may still be in the pipe
		p.kill()
		waitFor(p.exited, 5*time.Second)
		waitFor(p.stderrDone, time.Second)
		p.finishStart("", &spec.Error{Code: CodeExited, Message: fmt.Sprintf(
			"worker pid %d stopped before its ready line: %s; last stderr lines: %s", p.pid, p.exitStatus(), p.tail.String())})
	case <-timer.C:
		p.finishStart("", &spec.Error{Code: CodeLoadTimeout, Message: fmt.Sprintf(
			"worker pid %d sent no ready line within %s; last stderr lines: %s", p.pid, d, p.tail.String())})
	}
	if p.startErr != nil {
		p.kill()
	}
}

// watch restarts the worker as soon as a ready process dies (unless the task is closed, the
// process was already replaced, or it keeps dying: then the next Run restarts it).
func (t *Task) watch(p *proc) {
	<-p.readyCh
	if p.startErr != nil {
		return
	}
	<-p.gone
	p.kill() // whatever is left of its process group, e.g. a child holding stdout
	waitFor(p.exited, 5*time.Second)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.p != p {
		return
	}
	t.streak++
	if t.streak > maxEagerRestarts {
		p.note("worker died %d times in a row; it will be restarted when a job needs it", t.streak)
		return
	}
	p.note("worker died (%s); restarting", p.exitStatus())
	t.spawnLocked()
}

func (t *Task) nextID() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	return fmt.Sprintf("job-%d", t.seq)
}

func (t *Task) scratchDir() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.scratch != "" {
		if err := os.MkdirAll(t.scratch, 0o700); err != nil {
			return "", err
		}
		return t.scratch, nil
	}
	if t.cfg.ScratchDir == "" {
		d, err := os.MkdirTemp("", "mediaqual-worker-")
		if err != nil {
			return "", err
		}
		t.scratch, t.ownScratch = d, true
		return d, nil
	}
	d, err := filepath.Abs(t.cfg.ScratchDir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", err
	}
	t.scratch = d
	return d, nil
}

// writeReference writes the job's reference in dir, as it was uploaded, and returns its path
// (set even on a write error, so the caller can remove it).
func writeReference(dir, id string, upload []byte) (string, error) {
	f, err := os.CreateTemp(dir, id+"-ref-*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(upload)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return f.Name(), err
}

// stream is a job's raw frame file as the worker fills it. Frames events (docs/WORKER.md)
// announce frames while the job runs: the first allocates the buffer once, at the request's
// final size, so the slices handed to Request.Frames never move, and each reads only what it
// announces; the result reads the rest. Without frames events the result reads the whole file
// in one read, as it is.
type stream struct {
	id, path  string
	size      spec.Size // the request's frame size
	maxFrames int       // the request's frame count
	f         *os.File  // open from the first read
	buf       []byte
	n         int // frames read so far
}

func newStream(id, path string, s spec.Settings) *stream {
	return &stream{id: id, path: path, size: s.Size, maxFrames: max(s.NumFrames, 1)}
}

func badOutput(format string, a ...any) error {
	return &spec.Error{Code: CodeBadOutput, Message: fmt.Sprintf(format, a...)}
}

// announce checks a frames event against the rules and returns the newly announced bytes.
func (s *stream) announce(m message) ([]byte, error) {
	switch {
	case m.malformed != "":
		return nil, badOutput("%s", m.malformed)
	case m.ID != s.id:
		return nil, badOutput("frames event for job %q while job %s runs", m.ID, s.id)
	case m.Width != s.size.W || m.Height != s.size.H:
		return nil, badOutput("frames event of %dx%d frames: the request's (and any earlier event's) are %s", m.Width, m.Height, s.size)
	case m.Frames <= s.n:
		return nil, badOutput("frames event of %d frames after %d: the count must increase", m.Frames, s.n)
	case m.Frames > s.maxFrames:
		return nil, badOutput("frames event of %d frames: the request has %d", m.Frames, s.maxFrames)
	}
	if s.buf == nil {
		s.buf = make([]byte, s.maxFrames*3*s.size.W*s.size.H)
	}
	from := s.n * 3 * s.size.W * s.size.H
	pix, err := s.read(from, m.Frames)
	if err != nil {
		return nil, err
	}
	s.n = m.Frames
	return pix, nil
}

// result checks the result line against the file and what frames events announced, and
// returns the frames.
func (s *stream) result(m message) (spec.Video, error) {
	n, w, h := m.Frames, m.Width, m.Height
	if n <= 0 || w <= 0 || h <= 0 || n > 1<<16 || w > 1<<15 || h > 1<<15 {
		return spec.Video{}, badOutput("result declares frames=%d width=%d height=%d", n, w, h)
	}
	if s.buf != nil {
		switch {
		case w != s.size.W || h != s.size.H:
			return spec.Video{}, badOutput("result declares %dx%d frames, the frames events %s", w, h, s.size)
		case n < s.n:
			return spec.Video{}, badOutput("result declares %d frames, fewer than the %d the frames events announced", n, s.n)
		case n > s.maxFrames:
			return spec.Video{}, badOutput("result declares %d frames, more than the %d asked, after frames events", n, s.maxFrames)
		}
	}
	want := int64(n) * int64(w) * int64(h) * 3
	if err := s.open(); err != nil {
		return spec.Video{}, err
	}
	st, err := s.f.Stat()
	if err != nil {
		return spec.Video{}, badOutput("stat raw frames: %v", err)
	}
	if st.Size() != want {
		return spec.Video{}, badOutput("raw frames: expected %d bytes (%d frames × %dx%d × 3 rgb24), got %d", want, n, w, h, st.Size())
	}
	if s.buf == nil {
		s.buf, s.size = make([]byte, want), spec.Size{W: w, H: h}
	}
	if _, err := s.read(s.n*3*w*h, n); err != nil {
		return spec.Video{}, err
	}
	return spec.Video{W: w, H: h, N: n, Pix: s.buf[:want]}, nil
}

// read reads the bytes from offset from up to the end of frame n into the buffer and returns
// them.
func (s *stream) read(from, n int) ([]byte, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	to := n * 3 * s.size.W * s.size.H
	got, err := s.f.ReadAt(s.buf[from:to], int64(from))
	if err != nil {
		size := "?"
		if st, serr := s.f.Stat(); serr == nil {
			size = fmt.Sprint(st.Size())
		}
		return nil, badOutput("raw frames: %d frames announced (%d bytes), the output file holds %s (reading: %v after %d bytes)",
			n, to, size, err, from+got)
	}
	return s.buf[from:to], nil
}

func (s *stream) open() error {
	if s.f != nil {
		return nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return badOutput("opening raw frames: %v", err)
	}
	s.f = f
	return nil
}

func (s *stream) close() {
	if s.f != nil {
		s.f.Close()
	}
}

// removals removes finished jobs' scratch files in the background and lets Close wait for
// them. (A Run that Close interrupts may start its removal after Close returned; its files are
// then in the Task's own scratch directory, which Close removes, or a caller's, as before.)
type removals struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0
}

func (r *removals) start(files []string, remove func(string) error, note func(string, ...any)) {
	if len(files) == 0 {
		return
	}
	r.mu.Lock()
	if r.n == 0 {
		r.idle = make(chan struct{})
	}
	r.n++
	r.mu.Unlock()
	go func() {
		for _, f := range files {
			if err := remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				note("removing scratch file: %v", err)
			}
		}
		r.mu.Lock()
		if r.n--; r.n == 0 {
			close(r.idle)
		}
		r.mu.Unlock()
	}()
}

// wait returns once no removal is pending.
func (r *removals) wait() {
	r.mu.Lock()
	idle, n := r.idle, r.n
	r.mu.Unlock()
	if n > 0 {
		<-idle
	}
}

// Protocol lines.

type runLine struct {
	Op        string        `json:"op"`
	ID        string        `json:"id"`
	Settings  spec.Settings `json:"settings"`
	Reference string        `json:"reference,omitempty"`
	Output    string        `json:"output"`
}

type cancelLine struct {
	Op string `json:"op"`
	ID string `json:"id"`
}

// badLine is a synthetic event for a job's line that did not parse.
const badLine = "\x00bad"

type envelope struct {
	Event string `json:"event"`
	ID    string `json:"id"`
}

type message struct {
	Event        string             `json:"event"`
	ID           string             `json:"id"`
	Precision    string             `json:"precision"`
	PID          int                `json:"pid"`
	Message      string             `json:"message"`
	Code         string             `json:"code"`
	Param        string             `json:"param"` // of an error: the run op's field at fault
	Done         int                `json:"done"`
	Total        int                `json:"total"`
	Frames       int                `json:"frames"`
	Width        int                `json:"width"`
	Height       int                `json:"height"`
	Actual       spec.Actual        `json:"actual"`
	Parity       *spec.Parity       `json:"parity"` // of ready: the worker's parity check at load
	TaskWallMS   float64            `json:"task_wall_ms"`
	PhasesMS     map[string]float64 `json:"phases_ms"`
	PeakMemoryMB float64            `json:"peak_memory_mb"`

	malformed string // a frames line that did not parse: why
}

type job struct {
	id   string
	ch   chan message
	done chan struct{} // closed when Run stops listening
}

// logger serializes writes to Config.Log.
type logger struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *logger) printf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, s)
}

func waitFor(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return false
	}
}

// exitText renders a process's exit for messages.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return ee.Error()
	}
	return err.Error()
}
