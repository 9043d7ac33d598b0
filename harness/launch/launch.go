//go:build unix

// Package launch starts a server under test as a subprocess of a Go test, waits until it is
// ready and tears it down when the test ends, in the style of etcd's e2e framework.
//
// It knows nothing about what the server serves: a binary, its arguments and environment, how to
// find its URL and which path says it is ready. The process gets its own process group (so Stop
// reaches every process it spawned) and, on Linux, a parent-death signal (so it dies with the
// test binary even when `go test -timeout` panics past t.Cleanup). Its stdout and stderr go to a
// log file whose tail is quoted in every failure.
package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediaqual/mediaqual/internal/procgroup"
)

// Defaults for the zero values of Config.
const (
	DefaultReadyPath    = "/ready"
	DefaultReadyTimeout = 2 * time.Minute
	DefaultStopTimeout  = 10 * time.Second
	// PollInterval is how often Start asks ReadyPath.
	PollInterval = 100 * time.Millisecond
	// TailLines is how many log lines failure messages quote.
	TailLines = 40
)

// listeningRE finds the URL in a server's stdout when Config.URLFromStdout is set.
var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// Config says how to start one server.
type Config struct {
	Binary string   // path or name (looked up in PATH) of the executable
	Args   []string // its arguments
	Env    []string // extra KEY=VALUE entries on top of os.Environ(); later entries win
	GPUs   string   // when non-empty, CUDA_VISIBLE_DEVICES for the child (overrides Env)
	Dir    string   // working directory, and where the log goes (default t.TempDir())

	ReadyPath    string        // polled with GET until it answers 200 (default "/ready")
	ReadyTimeout time.Duration // how long Start waits for readiness (default 2 min)
	StopTimeout  time.Duration // how long Stop waits after SIGTERM before SIGKILL (default 10 s)

	// How the URL is found; exactly one must be set.
	// Port > 0: the server is told nothing (put the port in Args yourself, e.g. from FreePort)
	// and the URL is http://127.0.0.1:Port.
	Port int
	// URLFromStdout: the first stdout line matching `listening on (http://\S+)` gives the URL.
	URLFromStdout bool
}

// Server is a running server process.
type Server struct {
	URL     string    // base URL, no trailing slash
	LogPath string    // the child's stdout and stderr
	Cmd     *exec.Cmd // the started command; Cmd.Process.Pid is also the process group id

	name        string
	stopTimeout time.Duration

	done    chan struct{} // closed once the process has been waited for
	waitErr error         // Cmd.Wait's result; read only after done

	stdoutDone chan struct{} // closed when the stdout copier has drained (URLFromStdout only)
	urlCh      chan string   // receives the URL found on stdout (URLFromStdout only)

	stopOnce sync.Once
	stopErr  error
	reported bool // the exit was already reported as a test failure
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another process may take
// BuildMediaserve builds the module's mediaserve (root is the module root) to out, for the
// suite and the tests that start a real server.
func BuildMediaserve(root, out string) error {
	build := exec.Command("go", "build", "-o", out, "./cmd/mediaserve")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building mediaserve: %v\n%s", err, b)
	}
	return nil
}

// it before the server binds it; prefer a server that binds port 0 and prints its URL.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Start starts the server, waits until ReadyPath answers 200 and registers its teardown with
// t.Cleanup: Stop, then t.Errorf with the log tail if the process exited uncleanly. It fails the
// test with t.Fatalf (quoting the log tail) if the process cannot start, exits before it is
// ready, or is not ready within ReadyTimeout.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Launch(cfg)
	if s != nil {
		t.Cleanup(func() {
			if err := s.Stop(); err != nil && !s.reported {
				t.Errorf("%s (pid %d) exited uncleanly: %v\n%s", s.name, s.pid(), err, s.tailBlock())
			}
		})
	}
	if err != nil {
		t.Fatalf("%v", err)
	}
	return s
}

// ErrNotReady is a server that was still running, and not ready, when its ReadyTimeout ended
// (one that exited before is not: its own words say why).
var ErrNotReady = errors.New("server not ready")

// Launch is Start for callers that own the server's lifetime themselves (a server that
// outlives the subtest that started it): it returns errors instead of failing a test, and the
// caller must call Stop. On error the returned Server, when non-nil, has been started and
// must still be stopped.
func Launch(cfg Config) (*Server, error) {
	if cfg.Binary == "" {
		return nil, errors.New("launch: Config.Binary is empty")
	}
	if (cfg.Port > 0) == cfg.URLFromStdout {
		return nil, errors.New("launch: set exactly one of Config.Port (> 0) and Config.URLFromStdout")
	}
	if cfg.Dir == "" {
		return nil, errors.New("launch: Config.Dir is empty")
	}
	if cfg.ReadyPath == "" {
		cfg.ReadyPath = DefaultReadyPath
	}
	if !strings.HasPrefix(cfg.ReadyPath, "/") {
		cfg.ReadyPath = "/" + cfg.ReadyPath
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}

	binary := cfg.Binary
	if strings.ContainsRune(binary, filepath.Separator) && !filepath.IsAbs(binary) {
		// exec would resolve it against Dir, not against the test's working directory.
		abs, err := filepath.Abs(binary)
		if err != nil {
			return nil, fmt.Errorf("launch: %v", err)
		}
		binary = abs
	}
	name := filepath.Base(binary)
	logf, err := openLog(cfg.Dir, name)
	if err != nil {
		return nil, fmt.Errorf("launch %s: creating the log: %v", name, err)
	}
	defer logf.Close() // the child holds its own descriptors

	cmd := exec.Command(binary, cfg.Args...)
	cmd.Dir = cfg.Dir
	cmd.Env = append(os.Environ(), cfg.Env...)
	if cfg.GPUs != "" {
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+cfg.GPUs)
	}
	cmd.SysProcAttr = procgroup.Attr()
	cmd.Stderr = logf

	s := &Server{
		LogPath: logf.Name(), Cmd: cmd, name: name, stopTimeout: cfg.StopTimeout,
		done: make(chan struct{}),
	}

	// With URLFromStdout, stdout goes through a pipe we read line by line (and copy to the log).
	// The pipe is an *os.File, so exec starts no copying goroutine and Wait does not wait for
	// grandchildren that inherited it.
	var stdoutR, stdoutW *os.File
	if cfg.URLFromStdout {
		if stdoutR, stdoutW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("launch %s: %v", name, err)
		}
		cmd.Stdout = stdoutW
	} else {
		cmd.Stdout = logf
	}

	if err := cmd.Start(); err != nil {
		if stdoutR != nil {
			stdoutR.Close()
			stdoutW.Close()
		}
		return nil, fmt.Errorf("launch %s: starting %s: %v", name, binary, err)
	}
	if stdoutW != nil {
		stdoutW.Close()
		s.urlCh = make(chan string, 1)
		s.stdoutDone = make(chan struct{})
		var out io.WriteCloser // nil: still scan for the URL, but the lines are lost from the log
		if f, err := os.OpenFile(s.LogPath, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			out = f
		}
		go s.copyStdout(stdoutR, out)
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if cfg.Port > 0 {
		s.URL = "http://127.0.0.1:" + strconv.Itoa(cfg.Port)
	}

	if err := s.waitReady(cfg); err != nil {
		return s, fmt.Errorf("%s (pid %d): %w", name, s.pid(), err)
	}
	return s, nil
}

// openLog creates a fresh log file in dir, opened for appending: the child's stderr and our copy
// of its stdout then never overwrite each other.
func openLog(dir, name string) (*os.File, error) {
	f, err := os.CreateTemp(dir, name+"-*.log")
	if err != nil {
		return nil, err
	}
	f.Close()
	return os.OpenFile(f.Name(), os.O_WRONLY|os.O_APPEND, 0)
}

// copyStdout copies the child's stdout to the log, sending the first URL it announces.
func (s *Server) copyStdout(r io.ReadCloser, log io.WriteCloser) {
	defer close(s.stdoutDone)
	defer r.Close()
	if log != nil {
		defer log.Close()
	}
	br := bufio.NewReader(r)
	found := false
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if log != nil {
				_, _ = io.WriteString(log, line)
			}
			if !found {
				if m := listeningRE.FindStringSubmatch(line); m != nil {
					found = true
					s.urlCh <- strings.TrimRight(m[1], "/")
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// waitReady polls ReadyPath every PollInterval until it answers 200, the process exits, or
// ReadyTimeout passes.
func (s *Server) waitReady(cfg Config) error {
	deadline := time.NewTimer(cfg.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	hc := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	urlCh := s.urlCh // nil unless the URL is still to be read from stdout
	last := "no answer yet"
	if s.URL == "" {
		last = "no stdout line matching `listening on (http://\\S+)` yet"
	}
	for {
		if s.URL != "" {
			ok, what := s.probe(hc, cfg.ReadyPath)
			if ok {
				return nil
			}
			last = what
		}
		select {
		case u := <-urlCh:
			s.URL, urlCh = u, nil
			last = "no answer yet"
			continue // ask at once
		case <-s.done:
			s.reported = true
			s.drainStdout()
			return fmt.Errorf("server exited before ready: %s\n%s", exitDesc(s.waitErr), s.tailBlock())
		case <-deadline.C:
			where := "URL not known"
			if s.URL != "" {
				where = "GET " + s.URL + cfg.ReadyPath
			}
			return fmt.Errorf("%w after %v (%s: %s)\n%s",
				ErrNotReady, time.Since(start).Round(time.Millisecond), where, last, s.tailBlock())
		case <-tick.C:
		}
	}
}

// probe asks path once. Other than an exit, nothing it sees is fatal: the server may not be
// listening yet.
func (s *Server) probe(hc *http.Client, path string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() { // an exit aborts a request that would otherwise hang
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode == http.StatusOK {
		return true, ""
	}
	return false, fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

// drainStdout waits briefly for the stdout copier so the log holds the child's last words.
func (s *Server) drainStdout() {
	if s.stdoutDone == nil {
		return
	}
	select {
	case <-s.stdoutDone:
	case <-time.After(time.Second): // a grandchild may still hold the pipe
	}
}

// Stop ends the server: SIGTERM to its process group, up to StopTimeout (10 s) for the process to
// exit, then SIGKILL to the group. Whatever is left of the group afterwards is killed too. It
// returns nil only if the process exited with status 0 after SIGTERM (or before); an exit by
// signal, a non-zero status or needing SIGKILL is returned as an error. Stop is idempotent and
// safe to call concurrently; every call returns the first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	pgid := s.pid()
	select {
	case <-s.done: // already gone
	default:
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(s.stopTimeout):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-s.done
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			s.drainStdout()
			return fmt.Errorf("no exit within %v of SIGTERM; killed (%v)", s.stopTimeout, exitDesc(s.waitErr))
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // stragglers of the group
	s.drainStdout()
	if s.waitErr != nil {
		return fmt.Errorf("%v", exitDesc(s.waitErr))
	}
	return nil
}

// Exited reports whether the process has exited and, if so, Cmd.Wait's error (nil for status 0).
func (s *Server) Exited() (bool, error) {
	select {
	case <-s.done:
		return true, s.waitErr
	default:
		return false, nil
	}
}

// Done is closed when the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// LogTail returns the last n lines of the log (all of it if shorter).
func (s *Server) LogTail(n int) string {
	return tailFile(s.LogPath, n)
}

func (s *Server) pid() int {
	if s.Cmd.Process == nil {
		return 0
	}
	return s.Cmd.Process.Pid
}

// tailBlock is the log tail as quoted in failure messages.
func (s *Server) tailBlock() string {
	tail := s.LogTail(TailLines)
	if tail == "" {
		return fmt.Sprintf("--- %s: empty ---", s.LogPath)
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s\n--- end of log ---", TailLines, s.LogPath, strings.TrimRight(tail, "\n"))
}

func exitDesc(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.String() // "exit status 3", "signal: killed"
	}
	return err.Error()
}

// tailFile returns the last n lines of the file at path, reading at most its last 1 MiB.
func tailFile(path string, n int) string {
	if n <= 0 {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	defer f.Close()
	const maxRead = 1 << 20
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	off := max(st.Size()-maxRead, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	text := strings.TrimRight(string(buf), "\n")
	if text == "" {
		return ""
	}
	lines := strings.Split(text, "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first one is probably cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}
