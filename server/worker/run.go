package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

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
		if errors.Is(err, errLineTooLong) {
			return spec.Output{}, &spec.Error{Code: "invalid_request", BadInput: true, Message: "the job's run line: " + err.Error()}
		}
		p.note("sending job %s: %v", id, err)
		if attempt > 0 || errors.Is(err, errPartialLine) || !(errors.Is(err, syscall.EPIPE) || errors.Is(err, errStdinClosed)) {
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
			if m.overlong { // the job may still run: end it before the next one is sent
				if serr := p.send(cancelLine{Op: "cancel", ID: id}); serr != nil {
					p.note("sending cancel for job %s: %v", id, serr)
				}
				t.drainCancelled(p, j)
			}
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
	t.deathLocked(p)
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
