package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/fixtures"
	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

func TestHealthReadyModelsAndRequestID(t *testing.T) {
	e := start(t, server.Config{})
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/health", 200}, {"/ready", 200}, {"/v1/models", 200}, {"/v1/models/ref-edit", 200},
		{"/v1/models/nope", 404}, {"/v1/nothing", 404},
	} {
		r := e.do(t, "GET", tc.path, "", nil)
		assert.Equal(t, tc.status, r.status, tc.path)
		assert.Equal(t, "application/json", r.header.Get("Content-Type"), tc.path)
		assert.NotEmpty(t, r.header.Get("X-Request-ID"), tc.path)
		if tc.status >= 400 {
			assert.NotEmpty(t, r.apiErr(t)["message"], tc.path)
		}
	}
	r := e.do(t, "GET", "/health", "", nil, "X-Request-ID", "abc-123")
	assert.Equal(t, "abc-123", r.header.Get("X-Request-ID"))

	models := e.do(t, "GET", "/v1/models", "", nil).json(t)["data"].([]any)
	byID := map[string]map[string]any{}
	for _, m := range models {
		m := m.(map[string]any)
		byID[m["id"].(string)] = m
	}
	require.Contains(t, byID, "ref-t2v")
	assert.Equal(t, []any{"text_to_video"}, byID["ref-t2v"]["capabilities"])
	assert.Equal(t, "reference/L0", byID["ref-t2v"]["profile"])
	for _, k := range []string{"revision", "precision", "controls", "defaults", "family"} {
		assert.NotEmpty(t, byID["ref-edit"][k], k)
	}
}

func TestReadyOnlyAfterLoad(t *testing.T) {
	srv, err := server.New(server.Config{Models: referenceModels(t), ArtifactDir: t.TempDir()})
	require.NoError(t, err)
	h := srv.Handler()
	rec := httptestRecorder(h, "GET", "/ready")
	assert.Equal(t, 503, rec.Code)
	require.NoError(t, srv.Load(context.Background()))
	assert.Equal(t, 200, httptestRecorder(h, "GET", "/ready").Code)
	require.NoError(t, srv.Close())
}

// TestVideoLifecycle runs a ref-t2v job created each way a client may send it, down to the
// bytes ffprobe sees.
func TestVideoLifecycle(t *testing.T) {
	e := start(t, server.Config{})
	fields := map[string]string{"model": "ref-t2v", "prompt": "a red ball rolls left", "size": "160x96",
		"num_frames": "9", "fps": "8", "num_inference_steps": "2", "guidance_scale": "5.0", "seed": "3"}
	for name, create := range map[string]func() response{
		"multipart (AIPerf form)": func() response { return e.postForm(t, "/v1/videos", fields) },
		"json": func() response {
			return e.postJSON(t, "/v1/videos", map[string]any{"model": "ref-t2v", "prompt": "a red ball rolls left",
				"size": "160x96", "num_frames": 9, "fps": 8, "num_inference_steps": 2, "guidance_scale": 5.0, "seed": 3})
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := create()
			require.Equal(t, 200, r.status, "%s", r.body)
			obj := r.json(t)
			assert.Equal(t, "video", obj["object"])
			assert.Contains(t, []any{"queued", "in_progress"}, obj["status"])
			id := obj["id"].(string)

			done := e.waitVideo(t, id)
			require.Equal(t, "completed", done["status"], "%v", done)
			assert.EqualValues(t, 100, done["progress"])
			assert.Equal(t, e.http.URL+"/v1/videos/"+id+"/content", done["url"])
			actual := done["actual"].(map[string]any)
			assert.EqualValues(t, 9, actual["num_frames"])
			assert.EqualValues(t, 160, actual["width"])
			assert.EqualValues(t, 96, actual["height"])
			assert.EqualValues(t, 8, actual["fps"])
			assert.InDelta(t, 9.0/8, actual["duration_s"], 1e-9)
			assert.Greater(t, done["inference_time_s"], 0.0)
			assert.NotNil(t, done["expires_at"])

			c := e.do(t, "GET", "/v1/videos/"+id+"/content", "", nil)
			require.Equal(t, 200, c.status)
			assert.Equal(t, "video/mp4", c.header.Get("Content-Type"))
			path := filepath.Join(t.TempDir(), "clip.mp4")
			require.NoError(t, os.WriteFile(path, c.body, 0o644))
			p, err := media.FFprobe(context.Background(), path)
			require.NoError(t, err)
			assert.Equal(t, 9, p.Frames)
			assert.Equal(t, [2]int{160, 96}, [2]int{p.Width, p.Height})
			assert.Equal(t, "8", p.FPS.RatString())
			assert.InDelta(t, 9.0/8, p.DurationS, 1e-6)

			list := e.do(t, "GET", "/v1/videos?order=asc&limit=100", "", nil).json(t)
			assert.Contains(t, ids(list["data"]), id)

			d := e.do(t, "DELETE", "/v1/videos/"+id, "", nil)
			require.Equal(t, 200, d.status)
			assert.Equal(t, map[string]any{"id": id, "object": "video.deleted", "deleted": true}, d.json(t))
			assert.Equal(t, 404, e.do(t, "GET", "/v1/videos/"+id, "", nil).status)
			gone := e.do(t, "GET", "/v1/videos/"+id+"/content", "", nil)
			assert.Equal(t, 404, gone.status)
			assert.Contains(t, gone.apiErr(t)["message"], "deleted")
			assert.Empty(t, e.files(t))
		})
	}
}

func ids(data any) []string {
	var out []string
	for _, o := range data.([]any) {
		out = append(out, o.(map[string]any)["id"].(string))
	}
	return out
}

func TestContentBeforeCompletionAndDeleteRunning(t *testing.T) {
	task := &fakeTask{gate: make(chan struct{})}
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: task}}})
	running := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).json(t)["id"].(string)
	queued := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "q"}).json(t)["id"].(string)

	r := e.do(t, "GET", "/v1/videos/"+running+"/content", "", nil)
	assert.Equal(t, 409, r.status)
	assert.Equal(t, "job_not_complete", r.apiErr(t)["code"])

	for _, id := range []string{queued, running} {
		assert.Equal(t, 200, e.do(t, "DELETE", "/v1/videos/"+id, "", nil).status)
	}
	close(task.gate)
	later := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "later"}).json(t)["id"].(string)
	assert.Equal(t, "completed", e.waitVideo(t, later)["status"], "the lane keeps serving after deletes")

	require.Eventually(t, func() bool {
		return countStatus(e.ledger.entries(t), "job", "cancelled") == 2
	}, 5*time.Second, 10*time.Millisecond, "each deleted job gets its terminal ledger line")
	require.NoError(t, e.srv.Close())
	assert.Empty(t, e.files(t))
}

func countStatus(entries []server.LedgerEntry, event, status string) int {
	n := 0
	for _, e := range entries {
		if e.Event == event && e.Status == status {
			n++
		}
	}
	return n
}

func TestExpiryRemovesArtifacts(t *testing.T) {
	e := start(t, server.Config{
		Models:   []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: &fakeTask{}}},
		Lifetime: 300 * time.Millisecond, JanitorEvery: 20 * time.Millisecond,
	})
	id := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).json(t)["id"].(string)
	done := e.waitVideo(t, id)
	require.Equal(t, "completed", done["status"])
	assert.Len(t, e.files(t), 1)
	require.Eventually(t, func() bool { return len(e.files(t)) == 0 }, 5*time.Second, 20*time.Millisecond)
	r := e.do(t, "GET", "/v1/videos/"+id, "", nil)
	assert.Equal(t, 404, r.status)
	assert.Contains(t, r.apiErr(t)["message"], "expired")
	assert.Equal(t, 1, countStatus(e.ledger.entries(t), "expire", "expired"))
}

func TestPollHeldUntilTheJobChanges(t *testing.T) {
	get := func(e *env, id string) chan map[string]any {
		got := make(chan map[string]any, 1)
		go func() {
			var obj map[string]any
			if r, err := http.Get(e.http.URL + "/v1/videos/" + id); err == nil {
				json.NewDecoder(r.Body).Decode(&obj)
				r.Body.Close()
			}
			got <- obj
		}()
		return got
	}
	t.Run("answers at the change", func(t *testing.T) {
		task := &fakeTask{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
		e := start(t, server.Config{PollHold: time.Minute, Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: task}}})
		id := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).json(t)["id"].(string)
		<-task.entered // in_progress: nothing changes until the gate opens
		got := get(e, id)
		select {
		case obj := <-got:
			t.Fatalf("the poll was answered while the job was unchanged: %v", obj)
		case <-time.After(300 * time.Millisecond):
		}
		close(task.gate)
		select {
		case obj := <-got:
			assert.Equal(t, "completed", obj["status"], "%v", obj)
			assert.EqualValues(t, 100, obj["progress"])
		case <-time.After(20 * time.Second):
			t.Fatal("the held poll was not answered when the job completed")
		}
	})
	t.Run("answers when the hold ends", func(t *testing.T) {
		task := &fakeTask{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
		e := start(t, server.Config{PollHold: 50 * time.Millisecond, Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: task}}})
		id := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).json(t)["id"].(string)
		<-task.entered
		select {
		case obj := <-get(e, id):
			assert.Equal(t, "in_progress", obj["status"], "%v", obj)
		case <-time.After(20 * time.Second):
			t.Fatal("the held poll outlived its hold")
		}
		close(task.gate)
	})
	t.Run("answers when the job is deleted", func(t *testing.T) {
		task := &fakeTask{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
		e := start(t, server.Config{PollHold: time.Minute, Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: task}}})
		id := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).json(t)["id"].(string)
		<-task.entered
		got := get(e, id)
		select {
		case obj := <-got:
			t.Fatalf("the poll was answered while the job was unchanged: %v", obj)
		case <-time.After(100 * time.Millisecond): // held
		}
		require.Equal(t, 200, e.do(t, "DELETE", "/v1/videos/"+id, "", nil).status)
		select {
		case obj := <-got:
			assert.Contains(t, obj["error"], "message", "a deleted job's poll is its 404: %v", obj)
		case <-time.After(20 * time.Second):
			t.Fatal("the held poll was not answered when the job was deleted")
		}
	})
}

func TestQueueSaturation(t *testing.T) {
	task := &fakeTask{gate: make(chan struct{})}
	e := start(t, server.Config{QueueCapacity: 2, Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: task}}})
	var accepted []string
	refused := 0
	for i := range 6 {
		r := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p", "seed": string(rune('0' + i))})
		switch r.status {
		case 200:
			accepted = append(accepted, r.json(t)["id"].(string))
		case 429:
			refused++
			assert.Equal(t, "server_busy", r.apiErr(t)["code"])
			assert.NotEmpty(t, r.header.Get("Retry-After"))
		default:
			t.Fatalf("unexpected %d: %s", r.status, r.body)
		}
		time.Sleep(10 * time.Millisecond) // let the lane pick up the first job
	}
	assert.Len(t, accepted, 3, "one running plus a queue of two")
	assert.Equal(t, 3, refused)
	close(task.gate)
	for _, id := range accepted {
		assert.Equal(t, "completed", e.waitVideo(t, id)["status"], "no accepted job is lost")
	}
	entries := e.ledger.entries(t)
	assert.Equal(t, 3, countStatus(entries, "job", "completed"))
	assert.Equal(t, 3, countStatus(entries, "rejected", "rejected"))
}

func TestActualMismatchFailsTheJob(t *testing.T) {
	for name, lie := range map[string]func(*spec.Output){
		"frames":     func(o *spec.Output) { o.Frames = o.Frames[1:] },
		"fps":        func(o *spec.Output) { o.Actual.FPS = 30 },
		"seed":       func(o *spec.Output) { o.Actual.Seed++ },
		"frame size": func(o *spec.Output) { o.Frames[0] = image.NewRGBA(image.Rect(0, 0, 2, 2)) },
		"video size": func(o *spec.Output) {
			v, _ := spec.PackRGBA(o.Frames)
			v.W, v.H = v.H, v.W
			o.Frames, o.Video = nil, &v
		},
		"video bytes": func(o *spec.Output) {
			v, _ := spec.PackRGBA(o.Frames)
			v.Pix = v.Pix[:len(v.Pix)-1]
			o.Frames, o.Video = nil, &v
		},
		"engine": func(o *spec.Output) { o.Actual.Engine = "regional-compile" },
		"layout": func(o *spec.Output) { o.Actual.Layout = "cfg-2" }, // a row without layouts reports none
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, server.Config{Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: &fakeTask{lie: lie}}}})
			id := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).json(t)["id"].(string)
			done := e.waitVideo(t, id)
			assert.Equal(t, "failed", done["status"])
			assert.Equal(t, "actual_mismatch", done["error"].(map[string]any)["code"])
			assert.Empty(t, e.files(t))
		})
	}
}

// TestImageEdit covers both response formats; refused edits are in TestBadInput.
func TestImageEdit(t *testing.T) {
	e := start(t, server.Config{})
	ref := pngBytes(t, 96, 64, color.RGBA{40, 90, 200, 255})
	img := part{"image", "ref.png", ref}

	r := e.postForm(t, "/v1/images/edits", map[string]string{"model": "ref-edit", "prompt": "invert the colours", "size": "auto", "response_format": "b64_json", "n": "1"}, img)
	require.Equal(t, 200, r.status, "%s", r.body)
	obj := r.json(t)
	assert.Equal(t, "96x64", obj["size"])
	out, err := base64.StdEncoding.DecodeString(obj["data"].([]any)[0].(map[string]any)["b64_json"].(string))
	require.NoError(t, err)
	dec, err := png.Decode(bytes.NewReader(out))
	require.NoError(t, err)
	assert.Equal(t, image.Rect(0, 0, 96, 64), dec.Bounds())
	refImg, _ := png.Decode(bytes.NewReader(ref))
	assert.NotEqual(t, pixel(refImg, 10, 10), pixel(dec, 10, 10), "the edit changed the image")
	assert.Empty(t, e.files(t), "b64_json keeps nothing on disk")
	sum := sha256.Sum256(out) // the PNG kept in memory: digested as sent
	assert.Equal(t, hex.EncodeToString(sum[:]), obj["sha256"])
	var ledgered []string
	for _, en := range e.ledger.entries(t) {
		if en.Event == "job" && en.Output != nil {
			ledgered = append(ledgered, en.Output.SHA256)
			assert.EqualValues(t, len(out), en.Output.Bytes)
		}
	}
	assert.Equal(t, []string{hex.EncodeToString(sum[:])}, ledgered)

	r = e.postForm(t, "/v1/images/edits", map[string]string{"model": "ref-edit", "prompt": "grayscale", "size": "256x256", "response_format": "url"}, part{"image[]", "ref.png", ref})
	require.Equal(t, 200, r.status, "%s", r.body)
	obj = r.json(t)
	url := obj["data"].([]any)[0].(map[string]any)["url"].(string)
	require.True(t, strings.HasPrefix(url, e.http.URL+"/v1/images/img_"))
	c := e.do(t, "GET", strings.TrimPrefix(url, e.http.URL), "", nil)
	require.Equal(t, 200, c.status)
	assert.Equal(t, "image/png", c.header.Get("Content-Type"))
	cfg, err := png.DecodeConfig(bytes.NewReader(c.body))
	require.NoError(t, err)
	assert.Equal(t, [2]int{256, 256}, [2]int{cfg.Width, cfg.Height})
	assert.Len(t, e.files(t), 1)
	assert.Equal(t, 200, e.do(t, "DELETE", "/v1/images/"+obj["id"].(string), "", nil).status)
	assert.Empty(t, e.files(t))
}

func pixel(img image.Image, x, y int) [4]uint32 {
	r, g, b, a := img.At(x, y).RGBA()
	return [4]uint32{r, g, b, a}
}

func TestAuth(t *testing.T) {
	e := start(t, server.Config{APIKey: "s3cret"})
	assert.Equal(t, 200, e.do(t, "GET", "/health", "", nil).status)
	r := e.do(t, "GET", "/v1/models", "", nil)
	assert.Equal(t, 401, r.status)
	assert.Equal(t, "unauthorized", r.apiErr(t)["code"])
	assert.Equal(t, 401, e.do(t, "GET", "/v1/models", "", nil, "Authorization", "Bearer wrong").status)
	assert.Equal(t, 200, e.do(t, "GET", "/v1/models", "", nil, "Authorization", "Bearer s3cret").status)
}

func TestLedgerRecordsEveryRequest(t *testing.T) {
	e := start(t, server.Config{})
	r := e.do(t, "POST", "/v1/videos", "", nil, "X-Request-ID", "bad-1")
	require.Equal(t, 415, r.status)
	body, ct := multipartBody(t, map[string]string{"model": "ref-t2v", "prompt": "ledger", "size": "160x96", "num_frames": "5"})
	r = e.do(t, "POST", "/v1/videos", ct, body, "X-Request-ID", "good-1", "X-Correlation-ID", "session-9")
	require.Equal(t, 200, r.status)
	id := r.json(t)["id"].(string)
	require.Equal(t, "completed", e.waitVideo(t, id)["status"])

	byReq := map[string]server.LedgerEntry{}
	for _, l := range e.ledger.entries(t) {
		byReq[l.RequestID] = l
	}
	bad := byReq["bad-1"]
	assert.Equal(t, "rejected", bad.Status)
	assert.Equal(t, 415, bad.HTTPStatus)
	good := byReq["good-1"]
	assert.Equal(t, "job", good.Event)
	assert.Equal(t, "completed", good.Status)
	assert.Equal(t, "session-9", good.CorrelationID)
	assert.Equal(t, id, good.JobID)
	assert.Equal(t, "ref-t2v", good.Model)
	assert.Len(t, good.Inputs["prompt_sha256"], 64)
	require.NotNil(t, good.Output)
	assert.Len(t, good.Output.SHA256, 64)
	assert.Len(t, good.Output.FramesSHA256, 64)
	assert.Equal(t, 5, good.Actual.NumFrames)
	assert.Equal(t, 5, good.Settings.NumFrames)
	assert.Greater(t, good.Timing.TaskCallWallMS, 0.0)
	assert.Greater(t, good.Timing.EncodeMS, 0.0)
	assert.GreaterOrEqual(t, good.Timing.TotalMS, good.Timing.TaskCallWallMS+good.Timing.EncodeMS)
}

// TestDeterministicAndNative: the same inputs and seed give identical bytes over HTTP, and the
// HTTP artifact equals the native path's.
func TestDeterministicAndNative(t *testing.T) {
	e := start(t, server.Config{})
	fields := map[string]string{"prompt": "two squares orbit", "size": "160x96", "num_frames": "9", "fps": "16", "num_inference_steps": "3", "seed": "11"}
	var digests []string
	for range 2 {
		f := map[string]string{"model": "ref-t2v"}
		for k, v := range fields {
			f[k] = v
		}
		id := e.postForm(t, "/v1/videos", f).json(t)["id"].(string)
		done := e.waitVideo(t, id)
		require.Equal(t, "completed", done["status"])
		digests = append(digests, done["sha256"].(string))
	}
	assert.Equal(t, digests[0], digests[1])

	m := referenceModels(t)[0]
	require.Equal(t, "ref-t2v", m.Checkpoint.ID)
	_, p, err := server.RunNative(context.Background(), m, spec.TextToVideo, fields, nil, filepath.Join(t.TempDir(), "native.mp4"), "", nil)
	require.NoError(t, err)
	assert.Equal(t, digests[0], p.SHA256, "HTTP artifact == native artifact")
}

func TestShutdownEndsEveryJobAndLeavesNoFiles(t *testing.T) {
	task := &fakeTask{gate: make(chan struct{})}
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: task}}})
	done := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "done"}).json(t)["id"].(string)
	close(task.gate)
	e.waitVideo(t, done)
	task.gate = make(chan struct{}) // later jobs block until shutdown
	for range 3 {
		require.Equal(t, 200, e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "x"}).status)
	}
	require.NotEmpty(t, e.files(t))
	require.NoError(t, e.srv.Close())
	assert.Empty(t, e.files(t))
	entries := e.ledger.entries(t)
	assert.Equal(t, 1, countStatus(entries, "job", "completed"))
	assert.Equal(t, 3, countStatus(entries, "job", "failed"), "queued and running jobs end with a terminal line")
	for _, l := range entries {
		if l.Status == "failed" {
			assert.Equal(t, "server_shutdown", l.Error.Code)
		}
	}
	r := e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "late"})
	assert.Equal(t, 503, r.status)
}

var _ = http.StatusOK

// startRecorder is a Task that notes when each Run starts.
type startRecorder struct {
	fakeTask
	mu     sync.Mutex
	starts []time.Time
}

func (r *startRecorder) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	r.mu.Lock()
	r.starts = append(r.starts, time.Now())
	r.mu.Unlock()
	return r.fakeTask.Run(ctx, req)
}

// TestNextTaskStartsWhileTheClipEncodes: the lane hands a checked output to its encoder and
// takes the next job at once, so the second Task starts before the first clip is finished;
// the timing parts account for the whole of each job.
func TestNextTaskStartsWhileTheClipEncodes(t *testing.T) {
	task := &startRecorder{fakeTask: fakeTask{delay: 50 * time.Millisecond}}
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: task}}})
	var ids []string
	for range 2 {
		ids = append(ids, e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p", "num_frames": "33", "size": "64x48"}).json(t)["id"].(string))
	}
	for _, id := range ids {
		require.Equal(t, "completed", e.waitVideo(t, id)["status"])
	}
	entries := e.ledger.entries(t)
	var first server.LedgerEntry
	for _, en := range entries {
		if en.Event == "job" && en.JobID == ids[0] {
			first = en
		}
	}
	require.NotNil(t, first.Timing)
	task.mu.Lock()
	defer task.mu.Unlock()
	require.Len(t, task.starts, 2)
	assert.True(t, task.starts[1].Before(first.Time), "the second Task started %v after the first clip was done", task.starts[1].Sub(first.Time))
	tm := first.Timing
	assert.Greater(t, tm.EncodeMS, 0.0)
	assert.Greater(t, tm.ReceiveMS, 0.0, "reading and checking the request takes time")
	sum := tm.ReceiveMS + tm.QueueMS + tm.TaskCallWallMS + tm.HandoverMS + tm.EncodeWaitMS + tm.EncodeMS + tm.OtherMS
	assert.InDelta(t, tm.TotalMS, sum, 0.01, "the parts add up to the total: %+v", tm)
}

// TestLanesServeInParallel: a model with two lanes runs two jobs at once, each on its own
// Task; the ledger says which lane ran each and /v1/models how many lanes there are.
func TestLanesServeInParallel(t *testing.T) {
	a, b := &startRecorder{fakeTask: fakeTask{delay: 300 * time.Millisecond}}, &startRecorder{fakeTask: fakeTask{delay: 300 * time.Millisecond}}
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.TextToVideo), Task: a, Replicas: []spec.Task{b}, Devices: []string{"0", "1"}}}})
	var ids []string
	for range 2 {
		ids = append(ids, e.postForm(t, "/v1/videos", map[string]string{"model": "fake", "prompt": "p"}).json(t)["id"].(string))
	}
	for _, id := range ids {
		require.Equal(t, "completed", e.waitVideo(t, id)["status"])
	}
	a.mu.Lock()
	b.mu.Lock()
	require.Len(t, a.starts, 1, "each lane ran one job")
	require.Len(t, b.starts, 1)
	gap := a.starts[0].Sub(b.starts[0]).Abs()
	b.mu.Unlock()
	a.mu.Unlock()
	assert.Less(t, gap, 250*time.Millisecond, "the second job did not wait for the first")
	lanes := map[int]string{}
	for _, en := range e.ledger.entries(t) {
		if en.Event == "job" {
			require.NotNil(t, en.Lane)
			lanes[*en.Lane] = en.LaneDevices
			assert.Empty(t, en.Layout, "a row without layouts")
		}
	}
	assert.Equal(t, map[int]string{0: "0", 1: "1"}, lanes, "each job's lane and that lane's devices")
	m := e.do(t, http.MethodGet, "/v1/models/fake", "", nil).json(t)
	assert.Equal(t, 2.0, m["lanes"])
	assert.Equal(t, []any{"0", "1"}, m["lane_devices"])
	assert.NotContains(t, m, "layout")
	assert.NotContains(t, m, "layouts")
}

// TestInlineEditArtifactMissing: the fault that loses a finished artifact loses an inline
// edit's image too (it never was a file): the answer is a 500 naming it, not an empty image.
func TestInlineEditArtifactMissing(t *testing.T) {
	e := start(t, server.Config{Fault: "artifact-missing"})
	r := e.postForm(t, "/v1/images/edits", map[string]string{"model": "ref-edit", "prompt": "invert the colours", "size": "auto"},
		part{"image", "ref.png", pngBytes(t, 32, 32, color.RGBA{40, 90, 200, 255})})
	require.Equal(t, 500, r.status, "%s", r.body)
	assert.Equal(t, "artifact_missing", r.json(t)["error"].(map[string]any)["code"])
	assert.Empty(t, e.files(t))
}

// TestStreamedClipAndFaults: ref-t2v streams every frame into the encoder before it returns;
// a fault that replaces or shortens the frames after the Task makes the server encode them
// from scratch (nothing streamed counts), and the MP4 shows the fault.
func TestStreamedClipAndFaults(t *testing.T) {
	fields := map[string]string{"model": "ref-t2v", "prompt": "a red ball", "size": "160x96", "num_frames": "9", "num_inference_steps": "2"}
	for _, tc := range []struct {
		fault            string
		streamed, frames int
	}{{"", 9, 9}, {"wrong-frame-count", 0, 8}, {"nondeterministic", 0, 9}} {
		t.Run("fault "+tc.fault, func(t *testing.T) {
			e := start(t, server.Config{Fault: tc.fault})
			id := e.postForm(t, "/v1/videos", fields).json(t)["id"].(string)
			done := e.waitVideo(t, id)
			require.Equal(t, "completed", done["status"], "%v", done["error"])
			assert.EqualValues(t, tc.streamed, done["timing"].(map[string]any)["streamed_frames"])
			c := e.do(t, "GET", "/v1/videos/"+id+"/content", "", nil)
			require.Equal(t, 200, c.status)
			path := filepath.Join(t.TempDir(), "clip.mp4")
			require.NoError(t, os.WriteFile(path, c.body, 0o644))
			p, err := media.FFprobe(context.Background(), path)
			require.NoError(t, err)
			assert.Equal(t, tc.frames, p.Frames)
		})
	}
}

// pausedReader sleeps once, before its first read: an upload that stalls halfway.
type pausedReader struct {
	d    time.Duration
	done bool
}

func (p *pausedReader) Read([]byte) (int, error) {
	if !p.done {
		p.done = true
		time.Sleep(p.d)
	}
	return 0, io.EOF
}

// TestReceiveBodyIsTheUpload: receive_body_ms is the part of receive_ms the client's upload
// took: a body that stalls 300 ms halfway shows it there, and the checks after it are the rest.
func TestReceiveBodyIsTheUpload(t *testing.T) {
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.ImageEdit), Task: &fakeTask{}}}})
	ref, err := fixtures.Image("chelsea.png", 256, 256) // larger than the client's write buffer
	require.NoError(t, err)
	body, ct := multipartBody(t, map[string]string{"model": "fake", "prompt": "p", "size": "64x48"}, part{"image", "ref.png", ref})
	b, err := io.ReadAll(body)
	require.NoError(t, err)
	timing := func(r response) (receive, upload float64) {
		require.Equal(t, 200, r.status, "%s", r.body)
		tm := r.json(t)["timing"].(map[string]any)
		return tm["receive_ms"].(float64), tm["receive_body_ms"].(float64)
	}
	const pause = 300 * time.Millisecond
	half := len(b) / 2
	receive, upload := timing(e.do(t, "POST", "/v1/images/edits", ct,
		io.MultiReader(bytes.NewReader(b[:half]), &pausedReader{d: pause}, bytes.NewReader(b[half:]))))
	assert.GreaterOrEqual(t, upload, float64(pause.Milliseconds()), "the stall is in the upload")
	assert.Greater(t, receive, upload, "the checks come after the upload")
	receive, upload = timing(e.do(t, "POST", "/v1/images/edits", ct, bytes.NewReader(b)))
	assert.Less(t, upload, float64(pause.Milliseconds()))
	assert.Greater(t, receive, upload)
	// The first body came chunked, the second with its length (read into a buffer of that
	// size): both uploads are recorded whole.
	sum := sha256.Sum256(ref)
	var jobs int
	for _, en := range e.ledger.entries(t) {
		if en.Event == "job" {
			jobs++
			assert.Equal(t, hex.EncodeToString(sum[:]), en.Inputs["reference_sha256"])
		}
	}
	assert.Equal(t, 2, jobs)
}

// TestEditReferenceDecoded: an in-process Task gets the upload beside the image the standard
// library's decoders make of it (image/png for an RGB and a translucent PNG, image/jpeg for a
// JPEG).
func TestEditReferenceDecoded(t *testing.T) {
	reqs := make(chan spec.Request, 1)
	e := start(t, server.Config{Models: []server.Model{
		{Checkpoint: fakeCheckpoint("fake", spec.ImageEdit), Task: &fakeTask{seen: func(r spec.Request) { reqs <- r }}},
	}})
	src := image.NewNRGBA(image.Rect(0, 0, 13, 7))
	for i := range src.Pix {
		src.Pix[i] = byte(i * 29)
		if i%4 == 3 {
			src.Pix[i] = 255
		}
	}
	translucent := image.NewNRGBA(src.Rect)
	copy(translucent.Pix, src.Pix)
	translucent.Pix[3] = 7
	encode := func(enc func(io.Writer, image.Image) error, m image.Image) []byte {
		var b bytes.Buffer
		require.NoError(t, enc(&b, m))
		return b.Bytes()
	}
	jpegEncode := func(w io.Writer, m image.Image) error { return jpeg.Encode(w, m, nil) }
	fields := map[string]string{"model": "fake", "prompt": "p", "size": "32x32"}
	for name, upload := range map[string][]byte{
		"rgb.png": encode(png.Encode, src), "rgba.png": encode(png.Encode, translucent), "ref.jpg": encode(jpegEncode, src),
	} {
		r := e.postForm(t, "/v1/images/edits", fields, part{"image", name, upload})
		require.Equal(t, 200, r.status, "%s: %s", name, r.body)
		req := <-reqs
		require.Equal(t, upload, req.ReferenceFile, name)
		want, _, err := image.Decode(bytes.NewReader(upload))
		require.NoError(t, err, name)
		require.Equal(t, want, req.Reference, name)
	}
}

// TestEditDecodeOffTheRequest: an in-process edit's job is queued once the reference's header
// is checked, and its lane decodes it when it takes the job: a reference that is cheap to read but dear to
// decode (2048² of zeros, a few kilobytes deflated) shows the decode in queue_ms, not in
// receive_ms.
func TestEditDecodeOffTheRequest(t *testing.T) {
	e := start(t, server.Config{Models: []server.Model{{Checkpoint: fakeCheckpoint("fake", spec.ImageEdit), Task: &fakeTask{}}}})
	var ref bytes.Buffer
	require.NoError(t, png.Encode(&ref, image.NewNRGBA(image.Rect(0, 0, 2048, 2048))))
	require.Less(t, ref.Len(), 200<<10, "fixture: cheap to read")
	for range 3 {
		r := e.postForm(t, "/v1/images/edits", map[string]string{"model": "fake", "prompt": "p", "size": "64x48"}, part{"image", "ref.png", ref.Bytes()})
		require.Equal(t, 200, r.status, "%s", r.body)
		tm := r.json(t)["timing"].(map[string]any)
		assert.Less(t, tm["receive_ms"].(float64), tm["queue_ms"].(float64), "%v", tm)
	}
}

// parityTask is a fakeTask whose worker checked parity at load.
type parityTask struct {
	fakeTask
	p *spec.Parity
}

func (t *parityTask) Parity() *spec.Parity { return t.p }

// /v1/models shows the first lane's parity figures, where its Task reports them, and nothing
// for a Task that checks none.
func TestModelsShowParity(t *testing.T) {
	near := 0.01
	p := &spec.Parity{Reference: "eager", Served: "engine e", RelL2: &near, FP32Reference: 0.0146, FP32Served: 0.0146, Bound: 0.03, Passed: true}
	e := start(t, server.Config{Models: []server.Model{
		{Checkpoint: fakeCheckpoint("checked", spec.TextToVideo), Task: &parityTask{p: p}},
		{Checkpoint: fakeCheckpoint("plain", spec.TextToVideo), Task: &fakeTask{}},
	}})
	got := e.do(t, "GET", "/v1/models/checked", "", nil).json(t)
	require.Contains(t, got, "parity")
	par := got["parity"].(map[string]any)
	assert.Equal(t, map[string]any{"reference": "eager", "served": "engine e", "rel_l2": 0.01, "cond_rel_l2": nil, "max_abs": nil,
		"fp32_reference": 0.0146, "fp32_served": 0.0146, "bound": 0.03, "ceiling": 0.0, "cond_fp32_reference": 0.0,
		"cond_fp32_served": 0.0, "cond_bound": 0.0, "cond_ceiling": 0.0, "max_abs_fp32_reference": 0.0,
		"max_abs_fp32_served": 0.0, "max_abs_bound": 0.0, "bound_of": "", "passed": true}, par)
	assert.NotContains(t, e.do(t, "GET", "/v1/models/plain", "", nil).json(t), "parity")
}
