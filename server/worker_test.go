package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/internal/proctest"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
	"github.com/mediaqual/mediaqual/server/worker"
	"github.com/mediaqual/mediaqual/server/worker/workertest"
)

// TestMain lets this test binary double as a worker (see workertest): a lane started with
// Argv os.Args[0] and workertest.EnvMode set runs the test worker instead of the tests.
func TestMain(m *testing.M) {
	workertest.Main()
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// workerLane is a model lane served by this test binary as a worker in mode.
type workerLane struct {
	model   server.Model
	task    *worker.Task
	scratch string
	log     *syncBuffer
}

func newWorkerLane(t *testing.T, id, mode string, env ...string) workerLane {
	t.Helper()
	cp := fakeCheckpoint(id, spec.TextToVideo)
	cp.Precision = workertest.Precision // the worker reports this; checkActual compares it
	wl := workerLane{scratch: filepath.Join(t.TempDir(), "scratch"), log: &syncBuffer{}}
	wl.task = worker.New(worker.Config{
		Argv:        []string{os.Args[0]},
		Env:         append([]string{workertest.EnvMode + "=" + mode}, env...),
		ScratchDir:  wl.scratch,
		Log:         wl.log,
		LoadTimeout: 10 * time.Second,
	})
	wl.model = server.Model{Checkpoint: cp, Task: wl.task, Runtime: "worker"}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", wl.log)
		}
	})
	return wl
}

var workerStart = regexp.MustCompile(`worker\[(\d+)\]: test worker starting`)

// pids lists the worker processes started so far, in start order, from their first stderr
// lines. The server copies stderr asynchronously, so it waits until at least n are logged.
func (wl workerLane) pids(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	require.Eventually(t, func() bool {
		out = out[:0]
		for _, m := range workerStart.FindAllStringSubmatch(wl.log.String(), -1) {
			pid, err := strconv.Atoi(m[1])
			if err != nil {
				return false
			}
			out = append(out, pid)
		}
		return len(out) >= n
	}, 10*time.Second, 5*time.Millisecond, "%d worker start(s) logged", n)
	return out
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, d := range entries {
		names = append(names, d.Name())
	}
	return names
}

// patternFramesSHA256 is frames_sha256 of what the test worker renders: its rgb24 pattern
// as RGBA with alpha 255, frame after frame.
func patternFramesSHA256(seed int64, frames, w, h int) string {
	hs := sha256.New()
	for f := range frames {
		pix := make([]byte, 0, w*h*4)
		for y := range h {
			for x := range w {
				pix = append(pix, workertest.Pattern(seed, f, x, y, 0), workertest.Pattern(seed, f, x, y, 1),
					workertest.Pattern(seed, f, x, y, 2), 255)
			}
		}
		hs.Write(pix)
	}
	return hex.EncodeToString(hs.Sum(nil))
}

// TestWorkerCrashFailsJobAndLaneRecovers: a worker that dies mid-job fails that job with
// worker_crashed; the lane restarts the worker and the next job completes.
func TestWorkerCrashFailsJobAndLaneRecovers(t *testing.T) {
	wl := newWorkerLane(t, "wkr", "crash")
	e := start(t, server.Config{Models: []server.Model{wl.model}})
	first := wl.pids(t, 1)
	require.Len(t, first, 1, "Load started one worker")

	m := e.do(t, "GET", "/v1/models/wkr", "", nil)
	require.Equal(t, 200, m.status, "%s", m.body)
	assert.Equal(t, "worker", m.json(t)["runtime"])

	r := e.postForm(t, "/v1/videos", map[string]string{"model": "wkr", "prompt": "please crash mid-job"})
	require.Equal(t, 200, r.status, "%s", r.body)
	crashed := r.json(t)["id"].(string)
	done := e.waitVideo(t, crashed)
	require.Equal(t, "failed", done["status"], "%v", done)
	jerr := done["error"].(map[string]any)
	assert.Equal(t, worker.CodeCrashed, jerr["code"])
	assert.Contains(t, jerr["message"], strconv.Itoa(first[0]), "the message names the dead worker")
	proctest.AssertGone(t, first[0], 3*time.Second)

	r = e.postForm(t, "/v1/videos", map[string]string{"model": "wkr", "prompt": "a calm lake"})
	require.Equal(t, 200, r.status, "%s", r.body)
	ok := r.json(t)["id"].(string)
	done = e.waitVideo(t, ok)
	require.Equal(t, "completed", done["status"], "%v", done)
	actual := done["actual"].(map[string]any)
	assert.Equal(t, workertest.Precision, actual["precision"])
	assert.EqualValues(t, 5, actual["num_frames"])
	assert.Equal(t, 1, wl.task.Restarts(), "the lane restarted the worker once")
	pids := wl.pids(t, 2)
	require.Len(t, pids, 2)
	assert.NotEqual(t, pids[0], pids[1])

	c := e.do(t, "GET", "/v1/videos/"+ok+"/content", "", nil)
	require.Equal(t, 200, c.status, "%s", c.body)
	assert.Equal(t, "video/mp4", c.header.Get("Content-Type"))
	require.Greater(t, len(c.body), 8)
	assert.Equal(t, []byte("ftyp"), c.body[4:8], "an MP4")
	sum := sha256.Sum256(c.body)
	assert.Equal(t, hex.EncodeToString(sum[:]), done["sha256"])

	again := e.do(t, "GET", "/v1/videos/"+crashed, "", nil).json(t)
	assert.Equal(t, "failed", again["status"], "failed is terminal")
	assert.Equal(t, worker.CodeCrashed, again["error"].(map[string]any)["code"])

	entries := e.ledger.entries(t)
	assert.Equal(t, 1, countStatus(entries, "job", "failed"))
	assert.Equal(t, 1, countStatus(entries, "job", "completed"))
	for _, l := range entries {
		switch {
		case l.Event == "job" && l.Status == "failed":
			assert.Equal(t, crashed, l.JobID)
			require.NotNil(t, l.Error)
			assert.Equal(t, worker.CodeCrashed, l.Error.Code)
		case l.Event == "job" && l.Status == "completed":
			assert.Equal(t, ok, l.JobID)
			require.NotNil(t, l.Output)
			assert.Equal(t, patternFramesSHA256(7, 5, 64, 48), l.Output.FramesSHA256,
				"the worker's frames reach the ledger unchanged")
			assert.Equal(t, 1234.5, l.Output.PeakMemoryMB)
		}
	}

	for _, id := range []string{crashed, ok} {
		assert.Equal(t, 200, e.do(t, "DELETE", "/v1/videos/"+id, "", nil).status, id)
	}
	require.NoError(t, e.srv.Close())
	assert.Empty(t, e.files(t), "artifact dir")
	assert.Empty(t, dirNames(t, wl.scratch), "worker scratch dir")
	for _, pid := range pids {
		proctest.AssertGone(t, pid, 3*time.Second)
	}
}

// TestReadyWaitsForWorker: /ready answers 503 while a worker is still loading, and 200 once it
// sent its ready line.
func TestReadyWaitsForWorker(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "loaded")
	wl := newWorkerLane(t, "wkr", "gated", workertest.EnvMarker+"="+marker)
	srv, err := server.New(server.Config{Models: []server.Model{wl.model}, ArtifactDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Close()
	h := srv.Handler()

	loaded := make(chan error, 1)
	go func() { loaded <- srv.Load(context.Background()) }()
	wl.pids(t, 1) // the worker has started and is loading
	rec := httptestRecorder(h, "GET", "/ready")
	assert.Equal(t, 503, rec.Code)
	assert.Contains(t, rec.Body.String(), "not_ready")
	select {
	case err := <-loaded:
		t.Fatalf("Load returned before the worker was ready: %v", err)
	default:
	}

	require.NoError(t, os.WriteFile(marker, nil, 0o600))
	select {
	case err := <-loaded:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Load did not return after the worker became ready")
	}
	assert.Equal(t, 200, httptestRecorder(h, "GET", "/ready").Code)

	pids := wl.pids(t, 1)
	require.NoError(t, srv.Close())
	assert.Equal(t, 503, httptestRecorder(h, "GET", "/ready").Code, "not ready after Close")
	for _, pid := range pids {
		proctest.AssertGone(t, pid, 3*time.Second)
	}
	assert.Empty(t, dirNames(t, wl.scratch), "worker scratch dir")
}

// TestWorkerLayoutIsChecked: a row with layouts is served in one, which /v1/models and the
// ledger name; a worker that reports that layout completes its job, and one that ran another
// (here told --layout single while the server serves cfg-2) fails it with actual_mismatch.
func TestWorkerLayoutIsChecked(t *testing.T) {
	for _, tc := range []struct {
		told, status string
	}{{"cfg-2", "completed"}, {"single", "failed"}} {
		t.Run("told "+tc.told, func(t *testing.T) {
			wl := newWorkerLane(t, "wkr", "ok")
			wl.model.Checkpoint.Layouts = []spec.Layout{"single", "cfg-2"}
			wl.model.Checkpoint.Layout = "cfg-2"
			wl.model.Devices = []string{"2,3"}
			wl.task = worker.New(worker.Config{
				Argv: []string{os.Args[0], "--layout", tc.told}, Env: []string{workertest.EnvMode + "=ok"},
				ScratchDir: wl.scratch, Log: wl.log, LoadTimeout: 10 * time.Second,
			})
			wl.model.Task = wl.task
			e := start(t, server.Config{Models: []server.Model{wl.model}})

			m := e.do(t, "GET", "/v1/models/wkr", "", nil).json(t)
			assert.Equal(t, "cfg-2", m["layout"])
			assert.Equal(t, []any{"single", "cfg-2"}, m["layouts"])

			id := e.postForm(t, "/v1/videos", map[string]string{"model": "wkr", "prompt": "p"}).json(t)["id"].(string)
			done := e.waitVideo(t, id)
			require.Equal(t, tc.status, done["status"], "%v", done["error"])
			if tc.status == "completed" {
				assert.Equal(t, "cfg-2", done["actual"].(map[string]any)["layout"])
			} else {
				assert.Equal(t, map[string]any{"code": "actual_mismatch", "message": "layout: asked cfg-2, produced single"}, done["error"])
			}
			var job server.LedgerEntry
			for _, en := range e.ledger.entries(t) {
				if en.Event == "job" {
					job = en
				}
			}
			assert.Equal(t, spec.Layout("cfg-2"), job.Layout)
			assert.Equal(t, "2,3", job.LaneDevices)
		})
	}
}

// TestWorkerStreamsIntoTheEncoder: a worker that announces its frames while it decodes gives
// the artifact of one that does not, byte for byte; the frames it announced reached the
// encoder before its Task returned, and timing and the ledger say how many.
func TestWorkerStreamsIntoTheEncoder(t *testing.T) {
	plain, streaming := newWorkerLane(t, "plain", "ok"), newWorkerLane(t, "streaming", "stream")
	e := start(t, server.Config{Models: []server.Model{plain.model, streaming.model}})
	got := map[string]map[string]any{}
	for _, model := range []string{"plain", "streaming"} {
		id := e.postForm(t, "/v1/videos", map[string]string{"model": model, "prompt": "a fox", "num_frames": "13", "seed": "5"}).json(t)["id"].(string)
		got[model] = e.waitVideo(t, id)
		require.Equal(t, "completed", got[model]["status"], "%v", got[model]["error"])
	}
	assert.Equal(t, got["plain"]["sha256"], got["streaming"]["sha256"], "the same MP4")
	assert.EqualValues(t, 0, got["plain"]["timing"].(map[string]any)["streamed_frames"])
	assert.EqualValues(t, 9, got["streaming"]["timing"].(map[string]any)["streamed_frames"], "1, then 4 and 4; the last 4 came with the result")
	for _, en := range e.ledger.entries(t) {
		if en.Event == "job" {
			assert.Equal(t, patternFramesSHA256(5, 13, 64, 48), en.Output.FramesSHA256, en.Model)
			assert.Equal(t, map[string]int{"plain": 0, "streaming": 9}[en.Model], en.Timing.StreamedFrames, en.Model)
		}
	}
	require.NoError(t, e.srv.Close())
	assert.Empty(t, dirNames(t, streaming.scratch), "worker scratch dir")
}

// TestWorkerEditGetsTheUpload: a worker row's edit reaches the worker as the upload, which the
// worker decodes itself: the server checks only the header, so an image whose header is sound
// but whose data is not is refused by the worker, and still answered 400 naming image, with
// its failed job in the ledger, nothing left on disk and the worker serving the next edit.
func TestWorkerEditGetsTheUpload(t *testing.T) {
	wl := newWorkerLane(t, "wkr", "ok")
	wl.model.Checkpoint = fakeCheckpoint("wkr", spec.ImageEdit)
	wl.model.Checkpoint.Precision = workertest.Precision
	e := start(t, server.Config{Models: []server.Model{wl.model}})
	upload := pngBytes(t, 32, 32, color.RGBA{40, 90, 200, 255})
	edit := func(ref []byte, reqID string) response {
		body, ct := multipartBody(t, map[string]string{"model": "wkr", "prompt": "p", "size": "auto"}, part{"image", "ref.png", ref})
		return e.do(t, "POST", "/v1/images/edits", ct, body, "X-Request-ID", reqID)
	}
	editsTheUpload := func(r response) {
		t.Helper()
		require.Equal(t, 200, r.status, "%s", r.body)
		out, err := base64.StdEncoding.DecodeString(r.json(t)["data"].([]any)[0].(map[string]any)["b64_json"].(string))
		require.NoError(t, err)
		got, err := png.Decode(bytes.NewReader(out))
		require.NoError(t, err)
		want, err := png.Decode(bytes.NewReader(upload))
		require.NoError(t, err)
		require.Equal(t, want.Bounds(), got.Bounds())
		for y := range 32 {
			for x := range 32 {
				require.Equal(t, color.RGBAModel.Convert(want.At(x, y)), color.RGBAModel.Convert(got.At(x, y)), "(%d, %d)", x, y)
			}
		}
	}
	editsTheUpload(edit(upload, "good-1"))

	r := edit(pngHeader(32, 32, false), "header-only")
	require.Equal(t, 400, r.status, "%s", r.body)
	ae := r.apiErr(t)
	assert.Equal(t, "invalid_request", ae["code"])
	assert.Equal(t, "image", ae["param"])
	assert.Contains(t, ae["message"], "cannot read the reference", "the worker's own words: the server did not decode it")
	assert.Equal(t, 200, e.do(t, "GET", "/health", "", nil).status)
	var failed []server.LedgerEntry
	for _, l := range e.ledger.entries(t) {
		if l.RequestID == "header-only" {
			failed = append(failed, l)
		}
	}
	require.Len(t, failed, 1)
	assert.Equal(t, "job", failed[0].Event)
	assert.Equal(t, "failed", failed[0].Status)

	editsTheUpload(edit(upload, "good-2"))
	assert.Equal(t, 0, wl.task.Restarts())
	assert.Empty(t, e.files(t), "artifact dir")
	require.NoError(t, e.srv.Close())
	assert.Empty(t, dirNames(t, wl.scratch), "worker scratch dir")
}
