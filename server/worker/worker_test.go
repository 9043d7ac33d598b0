package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/internal/proctest"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server/worker/workertest"
)

func TestMain(m *testing.M) {
	workertest.Main() // when EnvMode is set, this binary is the worker and exits here
	os.Exit(m.Run())
}

type fixture struct {
	task    *Task
	scratch string
	log     *proctest.Buffer
}

// newTask builds a Task running this test binary as a worker in mode. On cleanup it closes
// the task and checks that no scratch file and no worker process remain.
func newTask(t testing.TB, mode string, tweak ...func(*Config, *Task)) fixture {
	t.Helper()
	scratch := filepath.Join(t.TempDir(), "scratch") // missing: the Task creates it
	logb := &proctest.Buffer{}
	cfg := Config{
		Argv:        []string{os.Args[0]},
		Env:         []string{workertest.EnvMode + "=" + mode},
		ScratchDir:  scratch,
		Log:         logb,
		LoadTimeout: 10 * time.Second,
	}
	task := New(cfg)
	for _, f := range tweak {
		f(&task.cfg, task)
	}
	t.Cleanup(func() {
		pid := workerPID(task)
		assert.NoError(t, task.Close())
		assertScratchEmpty(t, task, scratch)
		if pid > 0 {
			proctest.AssertGone(t, pid, 3*time.Second)
		}
		if t.Failed() {
			t.Logf("worker log:\n%s", logb)
		}
	})
	return fixture{task: task, scratch: scratch, log: logb}
}

func workerPID(task *Task) int {
	task.mu.Lock()
	defer task.mu.Unlock()
	if task.p == nil {
		return 0
	}
	return task.p.pid
}

// assertScratchEmpty checks dir once task's background removals are done: nothing is left.
func assertScratchEmpty(t testing.TB, task *Task, dir string) {
	t.Helper()
	task.removals.wait()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "scratch files left behind")
}

func requireCode(t *testing.T, err error, code string) *spec.Error {
	t.Helper()
	var se *spec.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, code, se.Code, "message: %s", se.Message)
	return se
}

func videoReq(prompt string, seed int64, frames, steps int) spec.Request {
	return spec.Request{Settings: spec.Settings{
		Prompt: prompt, NegativePrompt: "blurry", Size: spec.Size{W: 8, H: 6},
		NumFrames: frames, FPS: 16, Steps: steps, Guidance: 5.5, Seed: seed,
	}}
}

// requireFrames checks out holds exactly the pattern the test worker renders for seed.
func requireFrames(t *testing.T, out spec.Output, seed int64, frames, w, h int) {
	t.Helper()
	require.NotNil(t, out.Video, "a worker hands frames over as packed rgb24")
	require.NoError(t, out.Video.Check())
	require.Equal(t, frames, out.Video.N)
	for f := 0; f < frames; f++ {
		img := out.Video.RGBA(f)
		require.Equal(t, image.Rect(0, 0, w, h), img.Bounds())
		require.Equal(t, 4*w, img.Stride)
		require.Len(t, img.Pix, 4*w*h)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				want := color.RGBA{workertest.Pattern(seed, f, x, y, 0), workertest.Pattern(seed, f, x, y, 1), workertest.Pattern(seed, f, x, y, 2), 255}
				require.Equal(t, want, img.RGBAAt(x, y), "frame %d pixel %d,%d", f, x, y)
			}
		}
	}
}

func TestRunOK(t *testing.T) {
	fx := newTask(t, "ok")
	ctx := context.Background()
	require.NoError(t, fx.task.Load(ctx))
	require.NoError(t, fx.task.Load(ctx), "Load on a ready worker is a no-op")
	pid := workerPID(fx.task)

	const seed = 1<<40 + 3
	req := videoReq("a cat", seed, 5, 4)
	var progress [][2]int
	req.Progress = func(done, total int) { progress = append(progress, [2]int{done, total}) }
	out, err := fx.task.Run(ctx, req)
	require.NoError(t, err)
	requireFrames(t, out, seed, 5, 8, 6)
	assert.Equal(t, spec.Actual{
		NumFrames: 5, Width: 8, Height: 6, FPS: 16, DurationS: 5.0 / 16, Steps: 4, Guidance: 5.5,
		Seed: seed, Precision: workertest.Precision,
	}, out.Actual)
	assert.Greater(t, out.TaskWall, time.Duration(0))
	assert.Equal(t, 1234.5, out.PeakMemoryMB)
	assert.Equal(t, [][2]int{{1, 4}, {2, 4}, {3, 4}, {4, 4}}, progress)
	assertScratchEmpty(t, fx.task, fx.scratch)

	// A second job on the same process.
	out, err = fx.task.Run(ctx, videoReq("a dog", 9, 1, 1))
	require.NoError(t, err)
	requireFrames(t, out, 9, 1, 8, 6)
	assert.Equal(t, pid, workerPID(fx.task))
	assert.Equal(t, 0, fx.task.Restarts())

	log := fx.log.String()
	assert.Contains(t, log, fmt.Sprintf("worker[%d]: test worker starting in mode ok", pid), "stderr is copied, prefixed")
	assert.Contains(t, log, "ignoring unparseable stdout line")
	assert.Contains(t, log, `unknown job "no-such-job"`)
}

// The parity figures of the ready line are the Task's (what /v1/models shows); a worker whose
// ready line has none reports nil.
func TestParityFromReady(t *testing.T) {
	fx := newTask(t, "parity")
	assert.Nil(t, fx.task.Parity(), "nothing before ready")
	require.NoError(t, fx.task.Load(context.Background()))
	p := fx.task.Parity()
	require.NotNil(t, p)
	assert.Equal(t, spec.Parity{Reference: "eager, one device, before layout and engine", Served: "engine regional-compile, layout single",
		RelL2: ptr(0.0125), CondRelL2: ptr(0.004), MaxAbs: ptr(0.07),
		FP32Reference: 0.0542, FP32Served: 0.0487, Bound: 0.1084, Ceiling: 0.15,
		CondFP32Reference: 0.0146, CondFP32Served: 0.0127, CondBound: 0.0292, CondCeiling: 0.06,
		MaxAbsFP32Reference: 0.05, MaxAbsFP32Served: 0.06, MaxAbsBound: 0.2,
		BoundOf: "to fp32, each prediction <= 2 x eager bf16's", Passed: true}, *p)
	assert.Equal(t, "engine regional-compile, layout single against eager: cond 0.004, guided 0.0125, latents max abs 0.07; "+
		"to fp32, served (eager bf16) / bound: cond 0.0127 (0.0146) / 0.0292, guided 0.0487 (0.0542) / 0.108, latents max abs 0.06 (0.05) / 0.2: passed", p.String())

	plain := newTask(t, "ok")
	require.NoError(t, plain.task.Load(context.Background()))
	assert.Nil(t, plain.task.Parity())
}

func ptr[T any](v T) *T { return &v }

// TestImageEditReferenceAsUploaded: the worker gets the upload's bytes as they came, PNG or
// JPEG, and decodes them itself; a decoded Reference beside them is not what it reads. Here
// decoded and uploaded differ on purpose, so the output shows which one the worker read.
func TestImageEditReferenceAsUploaded(t *testing.T) {
	fx := newTask(t, "ok")
	decoded := image.NewNRGBA(image.Rect(0, 0, 4, 3))
	uploaded := image.NewNRGBA(image.Rect(0, 0, 4, 3))
	for i := range uploaded.Pix {
		uploaded.Pix[i] = byte(i*11) | 1
		if i%4 == 3 {
			uploaded.Pix[i], decoded.Pix[i] = 255, 255
		}
	}
	var pngFile, jpegFile bytes.Buffer
	require.NoError(t, png.Encode(&pngFile, uploaded))
	require.NoError(t, jpeg.Encode(&jpegFile, uploaded, &jpeg.Options{Quality: 100}))
	jpegDecoded, err := jpeg.Decode(bytes.NewReader(jpegFile.Bytes()))
	require.NoError(t, err)
	run := func(file []byte) image.Image {
		out, err := fx.task.Run(context.Background(), spec.Request{
			Settings:  spec.Settings{Prompt: "p", Size: spec.Size{W: 4, H: 3}, Steps: 1, Guidance: 1, Seed: 1},
			Reference: decoded, ReferenceFile: file,
		})
		require.NoError(t, err)
		return out.Video.RGBA(0)
	}
	u := uploaded.NRGBAAt(2, 1)
	assert.Equal(t, color.RGBA{u.R, u.G, u.B, 255}, run(pngFile.Bytes()).At(2, 1), "a PNG goes as uploaded")
	r, g, b, _ := jpegDecoded.At(2, 1).RGBA()
	assert.Equal(t, color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}, run(jpegFile.Bytes()).At(2, 1), "a JPEG goes as uploaded")
	assertScratchEmpty(t, fx.task, fx.scratch)
}

// TestUndecodableReference: a worker's error naming the run's reference (the upload did not
// decode) is the request's fault: bad input naming the request's image field, the worker's
// words kept; the worker stays up and nothing is left in scratch.
func TestUndecodableReference(t *testing.T) {
	fx := newTask(t, "ok")
	req := spec.Request{
		Settings:      spec.Settings{Prompt: "p", Size: spec.Size{W: 4, H: 3}, Steps: 1, Guidance: 1, Seed: 1},
		ReferenceFile: []byte("\x89PNG\r\n\x1a\nnot really"),
	}
	_, err := fx.task.Run(context.Background(), req)
	se := requireCode(t, err, "invalid_request")
	assert.True(t, se.BadInput)
	assert.Equal(t, "image", se.Param)
	assert.Contains(t, se.Message, "cannot read the reference")
	assertScratchEmpty(t, fx.task, fx.scratch)
	assert.Equal(t, 0, fx.task.Restarts())
}

func TestImageEditReference(t *testing.T) {
	fx := newTask(t, "ok")
	ref := image.NewNRGBA(image.Rect(0, 0, 7, 5))
	for i := range ref.Pix {
		ref.Pix[i] = byte(i * 37)
		if i%4 == 3 {
			ref.Pix[i] = 255
		}
	}
	var file bytes.Buffer
	require.NoError(t, png.Encode(&file, ref))
	req := spec.Request{
		Settings:      spec.Settings{Prompt: "make it blue", Size: spec.Size{W: 7, H: 5}, Steps: 2, Guidance: 4, Seed: 1},
		ReferenceFile: file.Bytes(),
	}
	// No Load: the first Run starts the worker.
	out, err := fx.task.Run(context.Background(), req)
	require.NoError(t, err)
	require.NotNil(t, out.Video)
	require.Equal(t, 1, out.Video.N)
	img := out.Video.RGBA(0)
	require.Equal(t, ref.Bounds(), img.Bounds())
	for y := 0; y < 5; y++ {
		for x := 0; x < 7; x++ {
			r := ref.NRGBAAt(x, y)
			require.Equal(t, color.RGBA{r.R, r.G, r.B, 255}, img.RGBAAt(x, y))
		}
	}
	assert.Equal(t, 0, out.Actual.NumFrames)
	assertScratchEmpty(t, fx.task, fx.scratch)
}

func TestCrashRestarts(t *testing.T) {
	fx := newTask(t, "crash")
	ctx := context.Background()
	require.NoError(t, fx.task.Load(ctx))
	oldPID := workerPID(fx.task)

	_, err := fx.task.Run(ctx, videoReq("please crash now", 1, 5, 4))
	se := requireCode(t, err, CodeCrashed)
	assert.Contains(t, se.Message, "exit status 3")
	assert.Contains(t, se.Message, "boom: simulated segfault")
	assertScratchEmpty(t, fx.task, fx.scratch)
	proctest.AssertGone(t, oldPID, 3*time.Second)

	out, err := fx.task.Run(ctx, videoReq("a calm lake", 2, 5, 4))
	require.NoError(t, err)
	requireFrames(t, out, 2, 5, 8, 6)
	assert.Equal(t, 1, fx.task.Restarts())
	assert.NotEqual(t, oldPID, workerPID(fx.task))
}

// TestCrashLoopIsBounded: a worker that every request crashes is restarted at once only
// maxEagerRestarts times; after that a job finds no worker (worker_unavailable, at once) until
// crashHold has passed, instead of a reload per request.
func TestCrashLoopIsBounded(t *testing.T) {
	fx := newTask(t, "crash", func(_ *Config, task *Task) { task.crashHold = 500 * time.Millisecond })
	ctx := context.Background()
	require.NoError(t, fx.task.Load(ctx))
	for i := range maxEagerRestarts + 1 {
		_, err := fx.task.Run(ctx, videoReq("please crash now", int64(i), 1, 1))
		requireCode(t, err, CodeCrashed)
	}
	start := time.Now()
	_, err := fx.task.Run(ctx, videoReq("please crash again", 9, 1, 1))
	se := requireCode(t, err, CodeUnavailable)
	assert.Contains(t, se.Message, "not for every request")
	assert.Less(t, time.Since(start), 100*time.Millisecond, "refused without a reload")
	assert.Equal(t, maxEagerRestarts, fx.task.Restarts())

	time.Sleep(500 * time.Millisecond)
	out, err := fx.task.Run(ctx, videoReq("a calm lake", 2, 1, 1))
	require.NoError(t, err)
	requireFrames(t, out, 2, 1, 8, 6)
	assert.Equal(t, maxEagerRestarts+1, fx.task.Restarts())
}

// TestOverlongLines: a worker's stdout line over 1 MiB fails the running job by name (it was
// once ignored, and the job hung), and a run line over 1 MiB is never sent.
func TestOverlongLines(t *testing.T) {
	fx := newTask(t, "crash")
	ctx := context.Background()
	require.NoError(t, fx.task.Load(ctx))
	pid := workerPID(fx.task)
	_, err := fx.task.Run(ctx, videoReq("shout please", 1, 1, 1))
	se := requireCode(t, err, CodeBadOutput)
	assert.Contains(t, se.Message, "longer than the protocol's 1048576 bytes")

	_, err = fx.task.Run(ctx, videoReq(strings.Repeat("p", 1<<20), 1, 1, 1))
	se = requireCode(t, err, "invalid_request")
	assert.True(t, se.BadInput)

	out, err := fx.task.Run(ctx, videoReq("fine", 3, 1, 1))
	require.NoError(t, err)
	requireFrames(t, out, 3, 1, 8, 6)
	assert.Equal(t, pid, workerPID(fx.task), "the same worker serves on")
}

func TestStdoutClosedMidJob(t *testing.T) {
	fx := newTask(t, "crash")
	ctx := context.Background()
	require.NoError(t, fx.task.Load(ctx))
	oldPID := workerPID(fx.task)

	start := time.Now()
	_, err := fx.task.Run(ctx, videoReq("hang up on the server", 1, 1, 1))
	se := requireCode(t, err, CodeCrashed)
	assert.Contains(t, se.Message, "closing stdout and staying alive")
	assert.Less(t, time.Since(start), 3*time.Second)
	proctest.AssertGone(t, oldPID, 3*time.Second) // killed, though it would have slept on
	assertScratchEmpty(t, fx.task, fx.scratch)

	out, err := fx.task.Run(ctx, videoReq("fine", 4, 1, 1))
	require.NoError(t, err)
	requireFrames(t, out, 4, 1, 8, 6)
	assert.Equal(t, 1, fx.task.Restarts())
}

func TestIdleCrashRestarts(t *testing.T) {
	fx := newTask(t, "ok")
	ctx := context.Background()
	require.NoError(t, fx.task.Load(ctx))
	oldPID := workerPID(fx.task)
	require.NoError(t, syscall.Kill(oldPID, syscall.SIGKILL))
	// The Task notices the death on its own and restarts the worker before any job.
	require.Eventually(t, func() bool {
		return fx.task.Restarts() == 1 && workerPID(fx.task) != oldPID
	}, 3*time.Second, 5*time.Millisecond)
	proctest.AssertGone(t, oldPID, 3*time.Second)

	out, err := fx.task.Run(ctx, videoReq("after an idle crash", 5, 1, 1))
	require.NoError(t, err)
	requireFrames(t, out, 5, 1, 8, 6)
	assert.Equal(t, 1, fx.task.Restarts())
}

func TestBadBytes(t *testing.T) {
	fx := newTask(t, "badbytes")
	_, err := fx.task.Run(context.Background(), videoReq("short", 1, 5, 2))
	se := requireCode(t, err, CodeBadOutput)
	want := 5 * 8 * 6 * 3
	assert.Contains(t, se.Message, fmt.Sprintf("expected %d bytes", want))
	assert.Contains(t, se.Message, fmt.Sprintf("got %d", want-7))
	assertScratchEmpty(t, fx.task, fx.scratch)
}

func TestMalformedResult(t *testing.T) {
	fx := newTask(t, "badresult")
	_, err := fx.task.Run(context.Background(), videoReq("x", 1, 5, 2))
	se := requireCode(t, err, CodeBadOutput)
	assert.Contains(t, se.Message, "malformed result line")
	assertScratchEmpty(t, fx.task, fx.scratch)
}

func TestErrorEvent(t *testing.T) {
	fx := newTask(t, "error")
	_, err := fx.task.Run(context.Background(), videoReq("x", 1, 5, 2))
	se := requireCode(t, err, "out_of_memory")
	assert.Equal(t, "CUDA out of memory (simulated)", se.Message)
	assert.False(t, se.BadInput, "an error naming another field than the reference is the worker's")
	assertScratchEmpty(t, fx.task, fx.scratch)
	assert.Equal(t, 0, fx.task.Restarts())
}

// cancelOnFirstProgress returns a request whose context is cancelled at its first progress.
func cancelOnFirstProgress(req spec.Request) (context.Context, spec.Request) {
	ctx, cancel := context.WithCancel(context.Background())
	req.Progress = func(int, int) { cancel() }
	return ctx, req
}

func TestCancel(t *testing.T) {
	fx := newTask(t, "slow")
	require.NoError(t, fx.task.Load(context.Background()))
	ctx, req := cancelOnFirstProgress(videoReq("a long one", 1, 5, 200)) // 4 s uncancelled
	start := time.Now()
	_, err := fx.task.Run(ctx, req)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), time.Second)
	assertScratchEmpty(t, fx.task, fx.scratch)

	out, err := fx.task.Run(context.Background(), videoReq("the next one", 99, 3, 2))
	require.NoError(t, err)
	requireFrames(t, out, 99, 3, 8, 6)
	assert.Equal(t, 0, fx.task.Restarts())
	assert.Contains(t, fx.log.String(), "cancelled at step")
}

func TestCancelIgnoredWaitsForJobEnd(t *testing.T) {
	fx := newTask(t, "stubborn")
	require.NoError(t, fx.task.Load(context.Background()))
	ctx, req := cancelOnFirstProgress(videoReq("ignores cancel", 1, 5, 15)) // ~300 ms
	_, err := fx.task.Run(ctx, req)
	require.ErrorIs(t, err, context.Canceled)
	assertScratchEmpty(t, fx.task, fx.scratch)

	// The worker finished the cancelled job; its result was discarded, not handed on.
	out, err := fx.task.Run(context.Background(), videoReq("the next one", 7, 2, 1))
	require.NoError(t, err)
	requireFrames(t, out, 7, 2, 8, 6)
	assert.Equal(t, 0, fx.task.Restarts())
}

func TestCancelIgnoredKillsAfterGrace(t *testing.T) {
	fx := newTask(t, "stubborn", func(_ *Config, task *Task) { task.cancelGrace = 100 * time.Millisecond })
	require.NoError(t, fx.task.Load(context.Background()))
	oldPID := workerPID(fx.task)
	ctx, req := cancelOnFirstProgress(videoReq("ignores cancel", 1, 5, 200)) // 4 s uncancelled
	start := time.Now()
	_, err := fx.task.Run(ctx, req)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), time.Second)
	assertScratchEmpty(t, fx.task, fx.scratch)
	proctest.AssertGone(t, oldPID, 3*time.Second)

	out, err := fx.task.Run(context.Background(), videoReq("the next one", 7, 2, 1))
	require.NoError(t, err)
	requireFrames(t, out, 7, 2, 8, 6)
	assert.Equal(t, 1, fx.task.Restarts())
}

func TestRunWithCancelledContext(t *testing.T) {
	fx := newTask(t, "ok")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := fx.task.Run(ctx, videoReq("never", 1, 1, 1))
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, workerPID(fx.task), "no worker started for a dead request")
}

func TestFatal(t *testing.T) {
	fx := newTask(t, "fatal")
	err := fx.task.Load(context.Background())
	se := requireCode(t, err, CodeFatal)
	assert.Equal(t, "weights not found: /nonexistent/model.safetensors", se.Message)
	proctest.AssertGone(t, workerPID(fx.task), 3*time.Second)

	pid := workerPID(fx.task)
	_, err = fx.task.Run(context.Background(), videoReq("x", 1, 1, 1))
	se = requireCode(t, err, CodeUnavailable)
	assert.Contains(t, se.Message, "weights not found")
	assert.Equal(t, pid, workerPID(fx.task), "no new start within the restart backoff")
}

func TestLoadTimeout(t *testing.T) {
	fx := newTask(t, "hang", func(c *Config, _ *Task) { c.LoadTimeout = 300 * time.Millisecond })
	start := time.Now()
	err := fx.task.Load(context.Background())
	requireCode(t, err, CodeLoadTimeout)
	assert.Less(t, time.Since(start), 2*time.Second)
	proctest.AssertGone(t, workerPID(fx.task), 3*time.Second)
}

func TestLoadContextCancelled(t *testing.T) {
	fx := newTask(t, "hang")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := fx.task.Load(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	proctest.AssertGone(t, workerPID(fx.task), 3*time.Second)
}

func TestStartFailure(t *testing.T) {
	fx := newTask(t, "ok", func(c *Config, _ *Task) { c.Argv = []string{"/nonexistent/worker-binary"} })
	requireCode(t, fx.task.Load(context.Background()), CodeStartFailed)
	_, err := fx.task.Run(context.Background(), videoReq("x", 1, 1, 1))
	requireCode(t, err, CodeUnavailable)
}

func TestRestartFails(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	fx := newTask(t, "once", func(c *Config, _ *Task) { c.Env = append(c.Env, workertest.EnvMarker+"="+marker) })
	ctx := context.Background()
	require.NoError(t, fx.task.Load(ctx))
	_, err := fx.task.Run(ctx, videoReq("crash please", 1, 1, 1))
	requireCode(t, err, CodeCrashed)

	_, err = fx.task.Run(ctx, videoReq("fine", 1, 1, 1))
	se := requireCode(t, err, CodeUnavailable)
	assert.Contains(t, se.Message, "second start refused")
	assert.Equal(t, 1, fx.task.Restarts())
	assertScratchEmpty(t, fx.task, fx.scratch)
}

func TestCloseKillsProcessGroup(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "child.pid")
	fx := newTask(t, "orphan", func(c *Config, _ *Task) { c.Env = append(c.Env, workertest.EnvMarker+"="+marker) })
	require.NoError(t, fx.task.Load(context.Background()))
	pid := workerPID(fx.task)
	b, err := os.ReadFile(marker)
	require.NoError(t, err)
	child, err := strconv.Atoi(string(b))
	require.NoError(t, err)
	require.False(t, proctest.Gone(child), "the worker's child runs")

	require.NoError(t, fx.task.Close())
	proctest.AssertGone(t, pid, 3*time.Second)
	proctest.AssertGone(t, child, 3*time.Second)

	_, err = fx.task.Run(context.Background(), videoReq("x", 1, 1, 1))
	requireCode(t, err, CodeUnavailable)
}

func TestCloseKillsWorkerIgnoringStdin(t *testing.T) {
	fx := newTask(t, "deaf", func(_ *Config, task *Task) { task.closeGrace = 200 * time.Millisecond })
	require.NoError(t, fx.task.Load(context.Background()))
	pid := workerPID(fx.task)
	out, err := fx.task.Run(context.Background(), videoReq("x", 3, 1, 1))
	require.NoError(t, err)
	requireFrames(t, out, 3, 1, 8, 6)

	start := time.Now()
	require.NoError(t, fx.task.Close())
	assert.Less(t, time.Since(start), 3*time.Second)
	proctest.AssertGone(t, pid, 3*time.Second)
}

func TestConcurrentRunsAreSerialized(t *testing.T) {
	fx := newTask(t, "ok")
	require.NoError(t, fx.task.Load(context.Background()))
	var wg sync.WaitGroup
	outs := make([]spec.Output, 6)
	errs := make([]error, 6)
	for i := range outs {
		wg.Go(func() {
			outs[i], errs[i] = fx.task.Run(context.Background(), videoReq("many", int64(100+i), 2, 3))
		})
	}
	wg.Wait()
	for i := range outs {
		require.NoError(t, errs[i])
		requireFrames(t, outs[i], int64(100+i), 2, 8, 6)
	}
	assertScratchEmpty(t, fx.task, fx.scratch)
}

// TestStreamFrames: frames events hand each announced chunk to Request.Frames as a slice of
// the one buffer the result returns, allocated at the request's size, and a worker that
// announces nothing works as before.
func TestStreamFrames(t *testing.T) {
	fx := newTask(t, "stream")
	const seed, w, h = 11, 8, 6
	fb := 3 * w * h
	for _, tc := range []struct {
		prompt string
		frames int
		chunks []int // frames per Frames call
	}{
		{"a fox", 13, []int{1, 4, 4}}, // the last chunk comes with the result
		{"a fox, announce all", 13, []int{1, 4, 4, 4}},
		{"a fox", 9, []int{1, 4}},
		{"a single frame", 1, nil},
	} {
		t.Run(tc.prompt, func(t *testing.T) {
			req := videoReq(tc.prompt, seed, tc.frames, 2)
			var chunks [][]byte
			req.Frames = func(pix []byte) { chunks = append(chunks, pix) }
			out, err := fx.task.Run(context.Background(), req)
			require.NoError(t, err)
			requireFrames(t, out, seed, tc.frames, w, h)
			assert.Equal(t, tc.frames*fb, cap(out.Video.Pix), "one buffer, at the request's size")
			var got []int
			off := 0
			for _, c := range chunks {
				require.Same(t, &out.Video.Pix[off], &c[0], "chunk at byte %d is the result's own bytes", off)
				got = append(got, len(c)/fb)
				off += len(c)
			}
			assert.Equal(t, tc.chunks, got)
		})
	}
	assert.Equal(t, 0, fx.task.Restarts())
	assertScratchEmpty(t, fx.task, fx.scratch)
}

// TestBadFrames: each breach of the frames rules fails its job with bad_worker_output naming
// it; the server cancels a job that is still running, and the next job on the same worker
// completes.
func TestBadFrames(t *testing.T) {
	fx := newTask(t, "badframes")
	ctx := context.Background()
	want := map[string]string{
		"malformed":      "malformed frames line: json: cannot unmarshal string",
		"other job":      `frames event for job "job-999" while job job-`,
		"wrong size":     "frames event of 10x6 frames: the request's (and any earlier event's) are 8x6",
		"size changes":   "frames event of 8x8 frames: the request's (and any earlier event's) are 8x6",
		"not increasing": "frames event of 2 frames after 2: the count must increase",
		"zero frames":    "frames event of 0 frames after 0: the count must increase",
		"beyond":         "frames event of 6 frames: the request has 5",
		"short file":     "raw frames: 2 frames announced (288 bytes), the output file holds 144",
		"result fewer":   "result declares 2 frames, fewer than the 3 the frames events announced",
		"result resized": "result declares 10x6 frames, the frames events 8x6",
		"result beyond":  "result declares 6 frames, more than the 5 asked, after frames events",
	}
	require.Len(t, want, len(workertest.BadFrames))
	for _, name := range workertest.BadFrames {
		t.Run(name, func(t *testing.T) {
			require.Contains(t, want, name)
			_, err := fx.task.Run(ctx, videoReq(name, 1, 5, 2))
			se := requireCode(t, err, CodeBadOutput)
			assert.Contains(t, se.Message, want[name])
			assertScratchEmpty(t, fx.task, fx.scratch)

			out, err := fx.task.Run(ctx, videoReq("fine", 3, 5, 2))
			require.NoError(t, err, "the worker serves the next job")
			requireFrames(t, out, 3, 5, 8, 6)
		})
	}
	assert.Equal(t, 0, fx.task.Restarts(), "no worker was killed")
	assert.Equal(t, 8, strings.Count(fx.log.String(), "cancelled after its bad frames event"), "each job with a bad frames event was cancelled")
}

// TestStreamReadsEachByteOnce: the result reads only what frames events did not announce:
// announced bytes changed in the file afterwards (which the rules forbid) are not read again.
func TestStreamReadsEachByteOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.rgb")
	raw := bytes.Repeat([]byte{1, 2, 3}, 5*4*2) // 5 frames of 4x2
	fb := 3 * 4 * 2
	require.NoError(t, os.WriteFile(path, raw[:2*fb], 0o600))
	st := newStream("job-1", path, spec.Settings{Size: spec.Size{W: 4, H: 2}, NumFrames: 5})
	defer st.close()
	pix, err := st.announce(message{Event: "frames", ID: "job-1", Frames: 2, Width: 4, Height: 2})
	require.NoError(t, err)
	assert.Equal(t, raw[:2*fb], pix)

	scribbled := append(make([]byte, 2*fb), raw[2*fb:]...)
	require.NoError(t, os.WriteFile(path, scribbled, 0o600))
	v, err := st.result(message{Event: "result", ID: "job-1", Frames: 5, Width: 4, Height: 2})
	require.NoError(t, err)
	assert.Equal(t, raw, v.Pix, "the announced frames as first read, the rest as the result found it")
	assert.Same(t, &pix[0], &v.Pix[0])
}

// TestScratchRemovedAfterRun: a job's scratch files are removed after Run has returned, not in
// its hand-over, and Close returns only once they are gone.
func TestScratchRemovedAfterRun(t *testing.T) {
	release := make(chan struct{})
	fx := newTask(t, "ok", func(_ *Config, task *Task) {
		task.remove = func(path string) error { <-release; return os.Remove(path) }
	})
	ran := make(chan error, 1)
	go func() {
		_, err := fx.task.Run(context.Background(), videoReq("a cat", 1, 2, 1))
		ran <- err
	}()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("Run waited for its scratch files' removal")
	}
	entries, err := os.ReadDir(fx.scratch)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "the output file is still there: its removal is held back")

	closed := make(chan error, 1)
	go func() { closed <- fx.task.Close() }()
	select {
	case <-closed:
		close(release)
		t.Fatal("Close returned while a removal was pending")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-closed)
	assertScratchEmpty(t, fx.task, fx.scratch)
}
