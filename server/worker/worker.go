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
	// which the worker is no longer restarted as soon as it dies, only when a job needs it,
	// and at most once per restartBackoff: jobs in between fail with worker_unavailable, so
	// requests that crash the worker cannot keep it reloading.
	maxEagerRestarts = 3
	// maxLine is the longest protocol line either side sends. A longer line from the worker
	// fails the running job (bad_worker_output) and is otherwise ignored.
	maxLine         = 1 << 20
	stderrTailLines = 20
	writeTimeout    = 10 * time.Second
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
	holdUntil  time.Time    // past maxEagerRestarts deaths: no restart before this
	seq        uint64
	scratch    string
	ownScratch bool

	// Tunables; tests shorten them.
	cancelGrace time.Duration
	closeGrace  time.Duration
	crashHold   time.Duration // restartBackoff
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
		crashHold:   restartBackoff,
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
		t.deathLocked(p)
		if wait := time.Until(t.holdUntil); wait > 0 {
			t.mu.Unlock()
			return nil, &spec.Error{Code: CodeUnavailable, Message: fmt.Sprintf(
				"the worker died %d times in a row; it is restarted again in %s, not for every request", t.streak, wait.Round(time.Millisecond))}
		}
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
	if t.deathLocked(p) > maxEagerRestarts {
		return
	}
	p.note("worker died (%s); restarting", p.exitStatus())
	t.spawnLocked()
}

// deathLocked counts p's death once, whoever notices it first (the watcher, the job it
// killed, the next job), and returns the deaths in a row; past maxEagerRestarts it holds
// restarts back for crashHold. t.mu must be held.
func (t *Task) deathLocked(p *proc) int {
	if !p.counted {
		p.counted = true
		t.streak++
		if t.streak > maxEagerRestarts {
			t.holdUntil = time.Now().Add(t.crashHold)
			p.note("worker died %d times in a row; it will be restarted when a job needs it, not before %s", t.streak, t.crashHold)
		}
	}
	return t.streak
}

func (t *Task) nextID() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	return fmt.Sprintf("job-%d", t.seq)
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
