package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// proc is one worker process and the goroutines that own its pipes:
//   - life:        starts the process on a locked OS thread, reaps it, closes exited;
//   - readStdout:  parses protocol lines, closes eof;
//   - readStderr:  copies stderr to the log and keeps its tail, closes stderrDone;
//   - Task.awaitReady and Task.watch: end its start, restart after its death.
type proc struct {
	t   *Task
	cmd *exec.Cmd
	pid int

	stdin       *os.File
	stdout      *os.File
	stderr      *os.File
	writeMu     sync.Mutex
	stdinClosed bool

	readyCh   chan struct{} // closed when the start ended; startErr tells how
	startOnce sync.Once
	startErr  error
	failedAt  time.Time
	precision string

	eof        chan struct{} // stdout reached EOF
	exited     chan struct{} // the process was reaped; exitErr is set
	gone       chan struct{} // eof or exited, whichever came first
	stderrDone chan struct{}
	goneOnce   sync.Once
	exitErr    error

	tail tail

	reapMu sync.Mutex
	reaped bool

	jobMu sync.Mutex
	job   *job

	counted bool // its death is in Task.streak (guarded by Task.mu)
}

func newProc(t *Task) *proc {
	return &proc{
		t:          t,
		readyCh:    make(chan struct{}),
		eof:        make(chan struct{}),
		exited:     make(chan struct{}),
		gone:       make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
}

// start launches the process (see life) and returns once it runs or failed to.
func (p *proc) start(cfg Config) error {
	if len(cfg.Argv) == 0 {
		return errors.New("worker Argv is empty")
	}
	started := make(chan error, 1)
	go p.life(cfg, started)
	return <-started
}

// life runs for the lifetime of the process on one locked OS thread, because Pdeathsig fires
// when the thread that started the child exits.
func (p *proc) life(cfg Config, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	inR, inW, err := os.Pipe()
	if err != nil {
		started <- err
		return
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		started <- err
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		started <- err
		return
	}
	cmd := exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	// *os.File streams are handed to the child directly: no copying goroutines, and Wait
	// does not depend on the pipes being closed.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		started <- err
		return
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	p.stdin, p.stdout, p.stderr = inW, outR, errR
	started <- nil

	if blockUntilExited(p.pid) == nil {
		// The leader is a zombie: its process group id cannot be reused yet, so killing
		// the group reaches only what it left behind.
		p.reapMu.Lock()
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		p.exitErr = cmd.Wait()
		p.reaped = true
		p.reapMu.Unlock()
	} else {
		p.exitErr = cmd.Wait()
		p.reapMu.Lock()
		p.reaped = true
		p.reapMu.Unlock()
	}
	p.closeStdin()
	close(p.exited)
	p.markGone()
}

// closeAll marks a process that never started as finished in every respect.
func (p *proc) closeAll() {
	p.reaped = true
	p.stdinClosed = true
	close(p.eof)
	close(p.exited)
	close(p.stderrDone)
	p.markGone()
}

func (p *proc) markGone() { p.goneOnce.Do(func() { close(p.gone) }) }

// finishStart ends the start once: err nil means ready.
func (p *proc) finishStart(precision string, err error) {
	p.startOnce.Do(func() {
		if err == nil {
			p.t.mu.Lock()
			p.t.everReady = true
			p.t.mu.Unlock()
		} else {
			p.failedAt = time.Now()
		}
		p.precision, p.startErr = precision, err
		close(p.readyCh)
	})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *proc) startDone() bool { return closed(p.readyCh) }
func (p *proc) isReady() bool   { return closed(p.readyCh) && p.startErr == nil }
func (p *proc) failed() bool    { return closed(p.readyCh) && p.startErr != nil }
func (p *proc) isGone() bool    { return closed(p.gone) }

// kill sends SIGKILL to the whole process group, unless the leader was already reaped.
func (p *proc) kill() {
	p.reapMu.Lock()
	defer p.reapMu.Unlock()
	if p.reaped || p.pid <= 0 {
		return
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

func (p *proc) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if len(b) > maxLine {
		return errLineTooLong
	}
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if p.stdinClosed {
		return errStdinClosed
	}
	_ = p.stdin.SetWriteDeadline(time.Now().Add(writeTimeout))
	n, err := p.stdin.Write(b)
	if err != nil && n > 0 {
		return fmt.Errorf("%w after %d of %d bytes: %w", errPartialLine, n, len(b), err)
	}
	return err
}

var (
	errStdinClosed = errors.New("worker stdin is closed")
	errLineTooLong = fmt.Errorf("the line is longer than the protocol's %d bytes", maxLine)
	// errPartialLine: the worker read part of the line before its stdin broke, so it may have
	// died of it: the line is not sent again.
	errPartialLine = errors.New("the worker stopped reading mid-line")
)

func (p *proc) closeStdin() {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	if !p.stdinClosed {
		p.stdinClosed = true
		p.stdin.Close()
	}
}

func (p *proc) exitStatus() string {
	if closed(p.exited) {
		return exitText(p.exitErr)
	}
	return "process still running"
}

func (p *proc) note(format string, args ...any) {
	p.t.log.printf("worker[%d] (server): "+format, append([]any{p.pid}, args...)...)
}

func (p *proc) setJob(j *job) {
	p.jobMu.Lock()
	p.job = j
	p.jobMu.Unlock()
}

func (p *proc) clearJob(j *job) {
	p.jobMu.Lock()
	if p.job == j {
		p.job = nil
	}
	p.jobMu.Unlock()
	close(j.done)
}

func (p *proc) currentJob() *job {
	p.jobMu.Lock()
	defer p.jobMu.Unlock()
	return p.job
}

func (p *proc) readStdout() {
	defer func() {
		p.stdout.Close()
		close(p.eof)
		p.markGone()
	}()
	r := bufio.NewReaderSize(p.stdout, 64<<10)
	for {
		line, tooLong, err := readLine(r)
		if tooLong {
			p.overlong()
		} else if len(bytes.TrimSpace(line)) > 0 {
			p.handle(line)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.note("reading stdout: %v", err)
			}
			return
		}
	}
}

// overlong fails the running job, if any, for a stdout line over maxLine: whatever it was,
// the job cannot be trusted to end (it may have been its result).
func (p *proc) overlong() {
	j := p.currentJob()
	if j == nil {
		p.note("ignoring stdout line longer than %d bytes", maxLine)
		return
	}
	m := message{Event: badLine, ID: j.id, overlong: true,
		Message: fmt.Sprintf("the worker sent a stdout line longer than the protocol's %d bytes during job %s", maxLine, j.id)}
	select {
	case j.ch <- m:
	case <-j.done:
	}
}

func (p *proc) handle(line []byte) {
	var env envelope
	if err := json.Unmarshal(line, &env); err != nil || env.Event == "" {
		p.note("ignoring unparseable stdout line (stdout is for protocol lines only; log to stderr): %.200q", line)
		return
	}
	var m message
	perr := json.Unmarshal(line, &m)
	switch env.Event {
	case "ready":
		if p.startDone() {
			p.note("ignoring ready line after the start ended")
			return
		}
		if m.Parity != nil {
			p.t.mu.Lock()
			p.t.parity = m.Parity
			p.t.mu.Unlock()
		}
		p.finishStart(m.Precision, nil)
	case "fatal":
		msg := m.Message
		if perr != nil || msg == "" {
			msg = fmt.Sprintf("worker reported fatal: %.500s", line)
		}
		if p.startDone() {
			p.note("worker reported fatal after ready: %s", msg)
			return
		}
		p.finishStart("", &spec.Error{Code: CodeFatal, Message: msg})
	case "progress", "result", "error", "frames":
		j := p.currentJob()
		// A frames event names the file the server reads: one for another job than the
		// running one goes to that job, which it fails (Run tells it by the id).
		if j == nil || (j.id != env.ID && env.Event != "frames") {
			p.note("ignoring %s line for unknown job %q", env.Event, env.ID)
			return
		}
		switch {
		case perr == nil:
		case env.Event == "progress":
			p.note("ignoring malformed progress line: %v", perr)
			return
		case env.Event == "frames":
			// The job still runs: Run cancels it, where a bad result or error line ended it.
			m = message{Event: env.Event, ID: env.ID, malformed: fmt.Sprintf("malformed frames line: %v", perr)}
		default:
			m = message{Event: badLine, ID: env.ID, Message: fmt.Sprintf("malformed %s line: %v", env.Event, perr)}
		}
		select {
		case j.ch <- m:
		case <-j.done:
		}
	default:
		p.note("ignoring unknown event %q", env.Event)
	}
}

func (p *proc) readStderr() {
	defer close(p.stderrDone)
	defer p.stderr.Close()
	r := bufio.NewReaderSize(p.stderr, 64<<10)
	for {
		line, tooLong, err := readLine(r)
		if len(line) > 0 || tooLong {
			s := string(line)
			if tooLong {
				s += " …(truncated)"
			}
			p.t.log.printf("worker[%d]: %s", p.pid, s)
			p.tail.add(s)
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one '\n'-terminated line without the terminator, keeping at most maxLine
// bytes of it (tooLong reports that the rest was dropped).
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		frag, e := r.ReadSlice('\n')
		if room := maxLine - len(line); len(frag) > room {
			tooLong = true
			frag = frag[:room]
		}
		line = append(line, frag...)
		if e == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, e
	}
}

// tail keeps the last stderr lines for crash messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(s string) {
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > stderrTailLines {
		t.lines = t.lines[len(t.lines)-stderrTailLines:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "(none)"
	}
	return strings.Join(t.lines, " | ")
}
