package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/internal/proctest"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
	"github.com/mediaqual/mediaqual/server/worker"
)

// waitRunning polls until job id is in_progress with at least minProgress percent done, so a
// kill lands in the middle of the Task.
func (e *env) waitRunning(t *testing.T, id string, minProgress float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		obj := e.do(t, "GET", "/v1/videos/"+id, "", nil).json(t)
		switch obj["status"] {
		case "in_progress":
			if obj["progress"].(float64) >= minProgress {
				return
			}
		case "completed", "failed":
			t.Fatalf("job %s ended before it could be killed mid-run: %v", id, obj)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("job %s never reached %v%% in progress", id, minProgress)
}

// TestWorkerKilledMidJob: SIGKILL from outside (an OOM kill, an operator) to a worker that is
// in the middle of a job fails that job with worker_crashed; the job queued behind it and a
// later one run on the restarted worker and complete, and nothing is left on disk.
func TestWorkerKilledMidJob(t *testing.T) {
	wl := newWorkerLane(t, "wkr", "slow") // 20 ms per step
	wl.model.Checkpoint.Controls.Steps.Max = 100
	e := start(t, server.Config{Models: []server.Model{wl.model}})
	pid := wl.pids(t, 1)[0]

	running := e.postForm(t, "/v1/videos", map[string]string{"model": "wkr", "prompt": "a long one", "num_inference_steps": "100"}).json(t)["id"].(string)
	queued := e.postForm(t, "/v1/videos", map[string]string{"model": "wkr", "prompt": "queued behind it"}).json(t)["id"].(string)
	e.waitRunning(t, running, 5)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	done := e.waitVideo(t, running)
	require.Equal(t, "failed", done["status"], "%v", done)
	jerr := done["error"].(map[string]any)
	assert.Equal(t, worker.CodeCrashed, jerr["code"])
	assert.Contains(t, jerr["message"], strconv.Itoa(pid), "the message names the dead worker")
	proctest.AssertGone(t, pid, 3*time.Second)

	assert.Equal(t, "completed", e.waitVideo(t, queued)["status"], "the queued job runs on the restarted worker")
	later := e.postForm(t, "/v1/videos", map[string]string{"model": "wkr", "prompt": "later"}).json(t)["id"].(string)
	assert.Equal(t, "completed", e.waitVideo(t, later)["status"])
	assert.Equal(t, 1, wl.task.Restarts())
	pids := wl.pids(t, 2)
	require.Len(t, pids, 2)

	entries := e.ledger.entries(t)
	assert.Equal(t, 1, countStatus(entries, "job", "failed"))
	assert.Equal(t, 2, countStatus(entries, "job", "completed"))
	for _, l := range entries {
		if l.Status == "failed" {
			assert.Equal(t, running, l.JobID)
			assert.Equal(t, worker.CodeCrashed, l.Error.Code)
		}
	}
	assert.Len(t, e.files(t), 2, "the two completed artifacts, nothing of the killed job")
	require.NoError(t, e.srv.Close())
	assert.Empty(t, e.files(t))
	assert.Empty(t, dirNames(t, wl.scratch), "worker scratch dir")
	proctest.AssertGone(t, pids[1], 3*time.Second)
}

// TestRestartSweepsOrphans: a server process that dies without Close leaves its artifacts
// behind; the next process's New, on the same directory, removes every file named like an
// artifact (finished or partial) and nothing else, and then serves normally.
func TestRestartSweepsOrphans(t *testing.T) {
	video := func() []server.Model {
		return []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: &fakeTask{}}}
	}
	e := start(t, server.Config{Models: video()})
	id := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "left behind"}).json(t)["id"].(string)
	require.Equal(t, "completed", e.waitVideo(t, id)["status"])
	require.Equal(t, []string{id + ".mp4"}, e.files(t))
	for _, name := range []string{
		".video_" + hex32 + ".mp4.tmp", // an encode the crash interrupted
		".img_" + hex32 + ".png.tmp",
		"img_" + hex32 + ".png",
		"notes.txt", "video_123.mp4", "video_" + hex32 + ".mp4.bak", // not ours: kept
	} {
		require.NoError(t, os.WriteFile(filepath.Join(e.dir, name), []byte("x"), 0o644))
	}
	ours := []string{"notes.txt", "video_" + hex32 + ".mp4.bak", "video_123.mp4"}

	// The first server "crashes": it is never closed (its Cleanup only runs after this test),
	// and a restarted process builds a new Server on the same directory.
	srv, err := server.New(server.Config{Models: video(), ArtifactDir: e.dir})
	require.NoError(t, err)
	assert.Equal(t, ours, e.files(t), "New removed the orphans, and only them")

	require.NoError(t, srv.Load(context.Background()))
	e2 := &env{srv: srv, http: httptest.NewServer(srv.Handler()), dir: e.dir, ledger: &syncBuffer{}}
	defer e2.http.Close()
	assert.Equal(t, 404, e2.do(t, "GET", "/v1/videos/"+id, "", nil).status, "the old process's jobs are gone")
	id2 := e2.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "after restart"}).json(t)["id"].(string)
	assert.Equal(t, "completed", e2.waitVideo(t, id2)["status"])
	require.NoError(t, srv.Close())
	assert.Equal(t, ours, e.files(t))
}

// goTool finds the go command that built this test, for building the real binary.
func goTool(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Skip("no go command to build cmd/mediaserve")
	}
	return p
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// built is cmd/mediaserve, built once for the tests that run it (TestMain removes it).
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// buildMediaserve builds cmd/mediaserve once and returns the binary's path.
func buildMediaserve(t *testing.T) string {
	t.Helper()
	gotool := goTool(t) // skips the test without one
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "mediaserve-bin-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "mediaserve")
		out, err := exec.Command(gotool, "build", "-o", built.bin, "github.com/mediaqual/mediaqual/cmd/mediaserve").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.bin
}

// startMediaserve runs the real binary on dir and returns it with its base URL once it listens
// (its stderr: cmd.Stderr, a *syncBuffer). flags are more of its flags; without a -model
// among them it serves ref-t2v alone.
func startMediaserve(t *testing.T, bin, dir, ledger string, flags ...string) (*exec.Cmd, *env) {
	t.Helper()
	if !slices.Contains(flags, "-model") {
		flags = append(flags, "-model", "ref-t2v")
	}
	cmd := exec.Command(bin, append([]string{"-port", "0", "-artifact-dir", dir, "-ledger", ledger}, flags...)...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("mediaserve %d stderr:\n%s", cmd.Process.Pid, stderr)
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	var base string
	select {
	case base = <-urls:
	case <-time.After(10 * time.Second):
		t.Fatalf("mediaserve did not print its address; stderr:\n%s", stderr)
	}
	// env's helpers need only the base URL.
	e := &env{http: &httptest.Server{URL: base}, dir: dir}
	require.Eventually(t, func() bool { return e.do(t, "GET", "/ready", "", nil).status == 200 }, 10*time.Second, 10*time.Millisecond)
	return cmd, e
}

// TestMediaserveKill9AndRestart builds cmd/mediaserve, kills it with SIGKILL in the middle of
// a job (no shutdown path runs), and starts it again on the same -artifact-dir: the new
// process removes the dead one's artifacts at startup, before it serves anything.
func TestMediaserveKill9AndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	tmp := t.TempDir()
	bin := buildMediaserve(t)
	dir, ledger := filepath.Join(tmp, "artifacts"), filepath.Join(tmp, "ledger.jsonl")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("not an artifact"), 0o644))

	first, e := startMediaserve(t, bin, dir, ledger)
	small := map[string]string{"model": "ref-t2v", "prompt": "a red ball", "size": "160x96", "num_frames": "5", "num_inference_steps": "1"}
	done := e.postForm(t, "/v1/videos", small).json(t)["id"].(string)
	require.Equal(t, "completed", e.waitVideo(t, done)["status"])
	// About 0.25 s per step: killed between steps, while the clip's encoder (started with the
	// Task, to take streamed frames) waits for its first frame.
	long := e.postForm(t, "/v1/videos", map[string]string{"model": "ref-t2v", "prompt": "a long one", "size": "480x272",
		"num_frames": "81", "num_inference_steps": "50"}).json(t)["id"].(string)
	e.waitRunning(t, long, 4)
	encoderOut := "." + long + ".mp4.tmp" // in ffmpeg's arguments, the file it writes at the end
	encoders := proctest.WithArg(encoderOut)
	require.NotEmpty(t, encoders, "the long job's encoder runs")
	// ffmpeg writes its file only at the end of its input, which the dead server's pipe gives
	// it: an encoder that outlived its server would go on to write one after the restart's
	// sweep. The kernel kills it with the server instead. It closes the dead server's pipe
	// before it sends that signal, so a running encoder may still see the end of its input
	// first and write its empty file (it did, under load): stopped, it can only be killed.
	for _, pid := range encoders {
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		require.Eventually(t, func() bool { return proctest.State(pid) == 'T' }, 3*time.Second, time.Millisecond, "encoder %d stopped", pid)
	}
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	_ = first.Wait()
	proctest.AssertGone(t, first.Process.Pid, 3*time.Second)
	for _, pid := range encoders {
		if !proctest.AssertGone(t, pid, 3*time.Second) {
			syscall.Kill(pid, syscall.SIGKILL) // it outlived the killed server
		}
	}
	assert.NotContains(t, dirNames(t, dir), encoderOut, "an encoder wrote its file after the server was killed")
	left := dirNames(t, dir)
	assert.Contains(t, left, done+".mp4", "the dead process left its artifact behind")

	second, e2 := startMediaserve(t, bin, dir, ledger)
	assert.Equal(t, []string{"keep.txt"}, dirNames(t, dir), "the restart removed every orphan (left: %v)", left)
	assert.Equal(t, 404, e2.do(t, "GET", "/v1/videos/"+done, "", nil).status)
	again := e2.postForm(t, "/v1/videos", small).json(t)["id"].(string)
	assert.Equal(t, "completed", e2.waitVideo(t, again)["status"], "the restarted server serves")
	assert.Len(t, dirNames(t, dir), 2)

	require.NoError(t, second.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.Wait(), "clean exit on SIGTERM")
	assert.Equal(t, []string{"keep.txt"}, dirNames(t, dir), "a clean shutdown removes its artifacts")

	// The ledger spans both processes; the killed job never got a terminal line (no process
	// was left to write it), which is what a client-side join sees after a kill -9.
	b, err := os.ReadFile(ledger)
	require.NoError(t, err)
	var completed []string
	for _, m := range regexp.MustCompile(`"job_id":"(video_[0-9a-f]+)",(?:"lane":[0-9]+,)?"status":"completed"`).FindAllSubmatch(b, -1) {
		completed = append(completed, string(m[1]))
	}
	slices.Sort(completed)
	want := []string{done, again}
	slices.Sort(want)
	assert.Equal(t, want, completed)
	assert.NotContains(t, string(b), `"job_id":"`+long+`"`)
}
