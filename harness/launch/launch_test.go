//go:build linux

package launch

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/internal/proctest"
)

// recorder is a testing.TB that records Fatalf and Errorf instead of failing the test, so the
// failures Start and its cleanup report can be checked. Everything else goes to the real test.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	fatals   []string
	errors   []string
	cleanups []func()
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatals = append(r.fatals, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

// runRecorded runs fn with a recorder in its own goroutine (so Fatalf can end it), then runs
// the cleanups fn registered, last first, and returns the recorder.
func runRecorded(t *testing.T, fn func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r
}

func waitDead(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return proctest.Gone(pid) }, within, 20*time.Millisecond, "pid %d still alive", pid)
}

func TestStartReadyFromStdout(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	s := Start(t, fakeConfig(t, "ok"))
	assert.GreaterOrEqual(t, time.Since(begin), 300*time.Millisecond, "ready only after /ready says so")
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+$`, s.URL)
	assert.Equal(t, "ready\n", get(t, s.URL+"/ready"))
	exited, err := s.Exited()
	assert.False(t, exited)
	assert.NoError(t, err)
	assert.Contains(t, s.LogTail(10), "fake listening on "+s.URL, "stdout is copied to the log")
	assert.Equal(t, filepath.Dir(s.LogPath), s.Cmd.Dir, "the log lives in Dir")

	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "Stop is idempotent")
	exited, err = s.Exited()
	assert.True(t, exited)
	assert.NoError(t, err)
	assert.Contains(t, s.LogTail(1), "SIGTERM, shutting down")
}

func TestStartPort(t *testing.T) {
	t.Parallel()
	port, err := FreePort()
	require.NoError(t, err)
	cfg := fakeConfig(t, "ok", "-port", strconv.Itoa(port))
	cfg.URLFromStdout, cfg.Port = false, port
	cfg.Dir = t.TempDir()
	s := Start(t, cfg)
	assert.Equal(t, fmt.Sprintf("http://127.0.0.1:%d", port), s.URL)
	assert.Equal(t, cfg.Dir, filepath.Dir(s.LogPath))
	assert.Contains(t, s.LogTail(40), "fake listening on http://127.0.0.1:"+strconv.Itoa(port))
}

func TestEarlyExit(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	r := runRecorded(t, func(tb testing.TB) {
		Start(tb, fakeConfig(t, "exit-early"))
		t.Error("Start returned")
	})
	assert.Less(t, time.Since(begin), 5*time.Second, "an exit is noticed at once, not at the timeout")
	require.Len(t, r.fatals, 1)
	msg := r.fatals[0]
	assert.Contains(t, msg, "server exited before ready: exit status 3\n")
	assert.Contains(t, msg, "fake: cannot load weights: no such file")
	assert.Empty(t, r.errors, "the exit is reported once, not again at cleanup")
}

func TestNeverReady(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, "never-ready")
	cfg.ReadyTimeout = 800 * time.Millisecond
	r := runRecorded(t, func(tb testing.TB) {
		Start(tb, cfg)
		t.Error("Start returned")
	})
	require.Len(t, r.fatals, 1)
	msg := r.fatals[0]
	assert.Contains(t, msg, "server not ready after")
	assert.Contains(t, msg, "/ready: HTTP 503 loading")
	assert.Contains(t, msg, "fake: never ready", "the log tail is quoted")
	assert.Empty(t, r.errors, "the server stopped cleanly on SIGTERM")
}

func TestNoURLOnStdout(t *testing.T) {
	t.Parallel()
	// The sleeper never prints a URL: the timeout says the URL never came.
	cfg := fakeConfig(t, "sleep")
	cfg.ReadyTimeout = 300 * time.Millisecond
	r := runRecorded(t, func(tb testing.TB) { Start(tb, cfg) })
	require.Len(t, r.fatals, 1)
	assert.Contains(t, r.fatals[0], "URL not known")
	assert.Contains(t, r.fatals[0], "no stdout line matching")
	require.Len(t, r.errors, 1, "the sleeper ignores nothing, so SIGTERM kills it: an unclean exit")
	assert.Contains(t, r.errors[0], "signal: terminated")
}

func TestRelativeBinary(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	require.NoError(t, err)
	rel, err := filepath.Rel(wd, os.Args[0])
	require.NoError(t, err)
	if !strings.ContainsRune(rel, filepath.Separator) {
		rel = "." + string(filepath.Separator) + rel
	}
	cfg := fakeConfig(t, "ok")
	cfg.Binary = rel // relative to the test's directory, not to Dir
	s := Start(t, cfg)
	assert.NotEqual(t, wd, s.Cmd.Dir)
	assert.True(t, filepath.IsAbs(s.Cmd.Path))
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"no binary":      {URLFromStdout: true},
		"no url source":  {Binary: os.Args[0]},
		"two url source": {Binary: os.Args[0], Port: 1234, URLFromStdout: true},
		"missing binary": {Binary: filepath.Join(t.TempDir(), "nope"), URLFromStdout: true},
	} {
		r := runRecorded(t, func(tb testing.TB) { Start(tb, cfg) })
		assert.Len(t, r.fatals, 1, name)
	}
}

func TestStopKillsGroup(t *testing.T) {
	t.Parallel()
	s := Start(t, fakeConfig(t, "grandchild"))
	gc, err := strconv.Atoi(get(t, s.URL+"/grandchild"))
	require.NoError(t, err)
	require.False(t, proctest.Gone(gc))
	// The grandchild does not handle SIGTERM, so the group's SIGTERM ends it with the server.
	require.NoError(t, s.Stop())
	waitDead(t, gc, 3*time.Second)
	waitDead(t, s.Cmd.Process.Pid, time.Second)
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, "ignore-term")
	cfg.StopTimeout = 300 * time.Millisecond
	var s *Server
	begin := time.Now()
	r := runRecorded(t, func(tb testing.TB) { s = Start(tb, cfg) })
	require.Empty(t, r.fatals)
	require.NotNil(t, s)
	assert.Less(t, time.Since(begin), 5*time.Second)
	require.Len(t, r.errors, 1, "cleanup reports the unclean stop")
	assert.Contains(t, r.errors[0], "exited uncleanly: no exit within 300ms of SIGTERM; killed (signal: killed)")
	assert.Contains(t, r.errors[0], "fake: mode ignore-term", "with the log tail")
	exited, err := s.Exited()
	assert.True(t, exited)
	assert.Error(t, err)
}

func TestCrashReportedAtCleanup(t *testing.T) {
	t.Parallel()
	var s *Server
	r := runRecorded(t, func(tb testing.TB) {
		s = Start(tb, fakeConfig(t, "ok"))
		assert.NoError(t, syscall.Kill(s.Cmd.Process.Pid, syscall.SIGKILL))
		<-s.Done()
	})
	require.Empty(t, r.fatals)
	require.Len(t, r.errors, 1)
	assert.Contains(t, r.errors[0], "exited uncleanly: signal: killed")
	assert.Contains(t, r.errors[0], "fake listening on "+s.URL)
}

func TestGPUsAndEnvReachTheChild(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, "ok")
	cfg.Env = append(cfg.Env, "CUDA_VISIBLE_DEVICES=0", "LAUNCH_EXTRA=yes")
	cfg.GPUs = "3,5"
	s := Start(t, cfg)
	assert.Equal(t, "3,5", get(t, s.URL+"/env?name=CUDA_VISIBLE_DEVICES"), "GPUs overrides Env")
	assert.Equal(t, "yes", get(t, s.URL+"/env?name=LAUNCH_EXTRA"))
	assert.Equal(t, os.Getenv("PATH"), get(t, s.URL+"/env?name=PATH"), "on top of os.Environ()")

	cfg.GPUs = ""
	cfg.Env = []string{fakeEnv + "=ok"}
	s = Start(t, cfg)
	assert.Equal(t, os.Getenv("CUDA_VISIBLE_DEVICES"), get(t, s.URL+"/env?name=CUDA_VISIBLE_DEVICES"), "no GPUs: inherited")
}

// TestHelperTimesOut is run by TestServerDiesWithTestBinary as a child test process: it starts
// a fake server, writes its pid and hangs until `go test -timeout` panics, which skips t.Cleanup.
func TestHelperTimesOut(t *testing.T) {
	pidFile := os.Getenv("LAUNCH_HELPER_PIDFILE")
	if pidFile == "" {
		t.Skip("helper process for TestServerDiesWithTestBinary")
	}
	s := Start(t, fakeConfig(t, "ok"))
	require.NoError(t, os.WriteFile(pidFile, []byte(strconv.Itoa(s.Cmd.Process.Pid)), 0o644))
	time.Sleep(time.Minute)
}

func TestServerDiesWithTestBinary(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTimesOut$", "-test.timeout=3s", "-test.v")
	// The helper's t.TempDir is never cleaned up (the timeout panic skips cleanup): keep it in ours.
	cmd.Env = append(os.Environ(), "LAUNCH_HELPER_PIDFILE="+pidFile, "TMPDIR="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	require.Error(t, err, "the helper must die of its timeout:\n%s", out.String())
	require.Contains(t, out.String(), "test timed out", out.String())
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err, "the helper never started its server:\n%s", out.String())
	pid, err := strconv.Atoi(string(b))
	require.NoError(t, err)
	waitDead(t, pid, 3*time.Second)
}

func TestTailFile(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "log")
	assert.Contains(t, tailFile(p, 3), "log unreadable")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	assert.Equal(t, "", tailFile(p, 3))
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	assert.Equal(t, "line 98\nline 99\nline 100\n", tailFile(p, 3))
	assert.Equal(t, "line 1\nline 2\n", tailFile(p, 200)[:14])
	assert.Equal(t, "", tailFile(p, 0))
}

// Launch tells a server that never became ready (ErrNotReady: give it more time) from one that
// exited saying why (more time would not help; qualify adds its load-timeout hint to the first
// only).
func TestLaunchTellsNotReadyFromExited(t *testing.T) {
	t.Parallel()
	never := fakeConfig(t, "never-ready")
	never.ReadyTimeout, never.Dir = 800*time.Millisecond, t.TempDir()
	s, err := Launch(never)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNotReady)
	assert.Contains(t, err.Error(), "server not ready after")
	if s != nil {
		_ = s.Stop()
	}
	early := fakeConfig(t, "exit-early")
	early.Dir = t.TempDir()
	s, err = Launch(early)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotReady)
	if s != nil {
		_ = s.Stop()
	}
}
