package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/api"
)

// fakeAPI is an httptest server speaking enough of docs/API.md to exercise the client. A job
// is queued at creation, in_progress from the second poll and ends (completed, or failed when
// its prompt is "fail") at poll doneAfter.
type fakeAPI struct {
	*httptest.Server
	t         *testing.T
	apiKey    string
	doneAfter int

	mu       sync.Mutex
	polls    map[string][]time.Time
	fields   map[string]string // of the last create or edit
	files    []string          // "field filename content-type" of the last request's file parts
	reqIDs   []string          // X-Request-ID of every request, "" when absent
	deleted  map[string]bool
	override map[string]http.HandlerFunc // "METHOD path" -> handler, before the normal routes
	nextID   int
	imagePNG []byte
}

func newFake(t *testing.T) *fakeAPI {
	f := &fakeAPI{
		t: t, doneAfter: 3, polls: map[string][]time.Time{}, deleted: map[string]bool{},
		override: map[string]http.HandlerFunc{}, imagePNG: testPNG(t, 3, 2),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]string{"status": "ready"})
	})
	mux.HandleFunc("GET /v1/models", f.models)
	mux.HandleFunc("POST /v1/videos", f.create)
	mux.HandleFunc("GET /v1/videos/{id}", f.get)
	mux.HandleFunc("GET /v1/videos/{id}/content", f.content)
	mux.HandleFunc("DELETE /v1/videos/{id}", f.del)
	mux.HandleFunc("POST /v1/images/edits", f.edit)
	mux.HandleFunc("GET /v1/images/{id}/content", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(f.imagePNG)
	})
	mux.HandleFunc("DELETE /v1/images/{id}", f.del)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		f.mu.Lock()
		f.reqIDs = append(f.reqIDs, id)
		h := f.override[r.Method+" "+r.URL.Path]
		key := f.apiKey
		f.mu.Unlock()
		if id == "" {
			id = "req_generated"
		}
		w.Header().Set("X-Request-ID", id)
		if key != "" && r.URL.Path != "/ready" && r.Header.Get("Authorization") != "Bearer "+key {
			writeErr(w, 401, "unauthorized", "", "missing or wrong bearer key")
			return
		}
		if h != nil {
			h(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// set changes the fake's configuration under its lock.
func (f *fakeAPI) set(change func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, param, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "param": param, "code": code}})
}

func testPNG(t *testing.T, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(1, 1, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return b.Bytes()
}

func (f *fakeAPI) models(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, `{"object":"list","data":[
	 {"id":"m-video","object":"model","family":"fam","profile":"p/L0","revision":"r1","precision":"fp32",
	  "capabilities":["text_to_video"],"controls":{"fps":[8,16]},"defaults":{"fps":16},
	  "runtime":"in-process","queue_capacity":16,"extra":"kept"},
	 {"id":"m-edit","capabilities":["image_edit"],"runtime":"worker"}]}`)
}

// readForm records a multipart body's text fields and file parts.
func (f *fakeAPI) readForm(r *http.Request) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return err
	}
	fields, files := map[string]string{}, []string{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(p)
		if p.FileName() != "" {
			files = append(files, fmt.Sprintf("%s %s %s %d", p.FormName(), p.FileName(), p.Header.Get("Content-Type"), len(b)))
		} else {
			fields[p.FormName()] = string(b)
		}
	}
	f.mu.Lock()
	f.fields, f.files = fields, files
	f.mu.Unlock()
	return nil
}

func (f *fakeAPI) create(w http.ResponseWriter, r *http.Request) {
	if err := f.readForm(r); err != nil {
		writeErr(w, 400, "invalid_request", "", err.Error())
		return
	}
	f.mu.Lock()
	fields := f.fields
	f.nextID++
	id := fmt.Sprintf("video_%d", f.nextID)
	if fields["prompt"] == "fail" {
		id += "_fail"
	}
	f.polls[id] = nil
	f.mu.Unlock()
	if fields["fps"] == "30" {
		writeErr(w, 400, "unsupported_value", "fps", "m-video supports fps [8 16], got 30")
		return
	}
	writeJSON(w, 200, map[string]any{"id": id, "object": "video", "model": fields["model"],
		"status": "queued", "progress": 0, "created_at": 1795962617, "completed_at": nil,
		"expires_at": nil, "error": nil, "prompt": fields["prompt"]})
}

func (f *fakeAPI) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f.mu.Lock()
	polls, ok := f.polls[id]
	gone := f.deleted[id]
	doneAfter := f.doneAfter
	if ok && !gone {
		polls = append(polls, time.Now())
		f.polls[id] = polls
	}
	f.mu.Unlock()
	if !ok || gone {
		writeErr(w, 404, "video_not_found", "id", "video "+id+" was deleted")
		return
	}
	n := len(polls)
	o := map[string]any{"id": id, "object": "video", "model": "m-video", "status": "queued",
		"progress": 0, "created_at": 1795962617, "completed_at": nil, "expires_at": nil, "error": nil}
	switch {
	case n >= doneAfter && strings.HasSuffix(id, "_fail"):
		o["status"], o["progress"] = "failed", 2
		o["error"] = map[string]any{"code": "actual_mismatch", "message": "asked 17 frames, got 16"}
	case n >= doneAfter:
		o["status"], o["progress"] = "completed", 100
		o["completed_at"], o["expires_at"] = 1795962618, 1795966218
		o["url"] = f.URL + "/v1/videos/" + id + "/content"
		o["size"], o["seconds"] = "320x192", "1.0625"
		o["settings"] = map[string]any{"prompt": "p", "size": "320x192", "num_frames": 17, "fps": 16,
			"num_inference_steps": 4, "guidance": 5, "seed": int64(9007199254740993)}
		o["actual"] = map[string]any{"num_frames": 17, "width": 320, "height": 192, "fps": 16,
			"duration_s": 1.0625, "num_inference_steps": 4, "guidance": 5, "seed": int64(9007199254740993), "precision": "fp32"}
		o["timing"] = map[string]any{"queue_ms": 0.1, "task_call_wall_ms": 89.5, "encode_ms": 297.4, "total_ms": 390.5}
		o["inference_time_s"], o["peak_memory_mb"], o["sha256"] = 0.0895, 12.5, "7cc6"
	case n >= 2:
		o["status"], o["progress"] = "in_progress", 1
	}
	writeJSON(w, 200, o)
}

func (f *fakeAPI) content(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "video/mp4")
	_, _ = io.WriteString(w, "\x00\x00\x00\x18ftypisom-fake-mp4")
}

func (f *fakeAPI) del(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f.mu.Lock()
	f.deleted[id] = true
	f.mu.Unlock()
	obj := "video.deleted"
	if strings.HasPrefix(r.URL.Path, "/v1/images/") {
		obj = "image.deleted"
	}
	writeJSON(w, 200, map[string]any{"id": id, "object": obj, "deleted": true})
}

func (f *fakeAPI) edit(w http.ResponseWriter, r *http.Request) {
	if err := f.readForm(r); err != nil {
		writeErr(w, 400, "invalid_request", "", err.Error())
		return
	}
	f.mu.Lock()
	fields := f.fields
	f.mu.Unlock()
	item := map[string]any{"b64_json": base64.StdEncoding.EncodeToString(f.imagePNG)}
	var expires any
	switch fields["response_format"] {
	case "url":
		item = map[string]any{"url": f.URL + "/v1/images/img_1/content"}
		expires = 1795966218
	case "relative-url":
		item = map[string]any{"url": "/v1/images/img_1/content"}
	case "empty":
		item = map[string]any{}
	}
	writeJSON(w, 200, map[string]any{"id": "img_1", "created": 1795962620, "model": fields["model"],
		"data": []any{item}, "size": "3x2", "output_format": "png",
		"actual":           map[string]any{"width": 3, "height": 2, "num_inference_steps": 2, "guidance": 1.5, "seed": 7, "precision": "bf16"},
		"timing":           map[string]any{"queue_ms": 1, "task_call_wall_ms": 12, "encode_ms": 3, "total_ms": 16},
		"inference_time_s": 0.012, "peak_memory_mb": 0, "sha256": "abcd", "expires_at": expires})
}

func (f *fakeAPI) client() *Client {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &Client{BaseURL: f.URL + "/", HTTP: f.Client(), APIKey: f.apiKey, PollEvery: 10 * time.Millisecond}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestVideoRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() { f.apiKey = "sekret" })
	c := f.client()

	require.NoError(t, c.Ready(ctx(t)))
	ms, err := c.Models(ctx(t))
	require.NoError(t, err)
	require.Len(t, ms, 2)
	assert.Equal(t, Model{ID: "m-video", Object: "model", Capabilities: []string{"text_to_video"},
		Family: "fam", Profile: "p/L0", Revision: "r1", Precision: "fp32", Runtime: "in-process",
		QueueCapacity: 16, Controls: api.Controls{FPS: []int{8, 16}},
		Defaults: api.Defaults{Settings: api.Settings{FPS: 16}}, Raw: ms[0].Raw}, ms[0])
	assert.Equal(t, "kept", ms[0].Raw["extra"])
	assert.True(t, ms[1].Has("image_edit"))
	assert.False(t, ms[1].Has("text_to_video"))

	v, err := c.CreateVideo(ctx(t), map[string]string{"model": "m-video", "prompt": "a red ball", "num_frames": "17", "seed": "42"}, "run-1:video/0")
	require.NoError(t, err)
	assert.Equal(t, "queued", v.Status)
	assert.Equal(t, "m-video", v.Model)
	assert.Nil(t, v.ExpiresAt)
	f.mu.Lock()
	assert.Equal(t, map[string]string{"model": "m-video", "prompt": "a red ball", "num_frames": "17", "seed": "42"}, f.fields)
	assert.Empty(t, f.files, "every value is a text field")
	assert.Equal(t, "run-1:video/0", f.reqIDs[len(f.reqIDs)-1])
	f.mu.Unlock()

	v, polls, err := c.WaitVideo(ctx(t), v.ID)
	require.NoError(t, err)
	assert.Equal(t, 3, polls.N)
	assert.Equal(t, StatusCompleted, v.Status)
	assert.True(t, v.Terminal())
	assert.Equal(t, 100, v.Progress)
	assert.Equal(t, Actual{NumFrames: 17, Width: 320, Height: 192, FPS: 16, DurationS: 1.0625,
		Steps: 4, Guidance: 5, Seed: 9007199254740993, Precision: "fp32"}, v.Actual)
	assert.Equal(t, Settings{Prompt: "p", Size: "320x192", NumFrames: 17, FPS: 16, Steps: 4, Guidance: 5, Seed: 9007199254740993}, v.Settings)
	assert.Equal(t, Timing{QueueMS: 0.1, TaskCallWallMS: 89.5, EncodeMS: 297.4, TotalMS: 390.5}, v.Timing)
	assert.Equal(t, 0.0895, v.InferenceTimeS)
	assert.Equal(t, 12.5, v.PeakMemoryMB)
	assert.Equal(t, "7cc6", v.SHA256)
	require.NotNil(t, v.ExpiresAt)
	assert.Equal(t, int64(1795966218), *v.ExpiresAt)
	assert.Equal(t, "1.0625", v.Seconds)
	assert.Equal(t, f.URL+"/v1/videos/"+v.ID+"/content", v.URL)
	assert.Nil(t, v.Error)
	assert.Equal(t, json.Number("9007199254740993"), v.Raw["actual"].(map[string]any)["seed"], "Raw keeps numbers exact")

	b, ct, err := c.Content(ctx(t), v.ID)
	require.NoError(t, err)
	assert.Equal(t, "video/mp4", ct)
	assert.Equal(t, "\x00\x00\x00\x18ftypisom-fake-mp4", string(b))

	require.NoError(t, c.DeleteVideo(ctx(t), v.ID))
	_, err = c.GetVideo(ctx(t), v.ID)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 404, ae.Status)
	assert.Equal(t, "video_not_found", ae.Body.Code)
	assert.Equal(t, "GET /v1/videos/"+v.ID+": HTTP 404 video_not_found (param id): video "+v.ID+" was deleted [X-Request-ID req_generated]", err.Error())

	c.APIKey = "wrong"
	_, err = c.Models(ctx(t))
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 401, ae.Status)
	assert.Equal(t, "unauthorized", ae.Body.Code)
}

func TestErrorEnvelope(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() {
		f.override["GET /ready"] = func(w http.ResponseWriter, r *http.Request) {
			writeErr(w, 503, "not_ready", "", "models are loading")
		}
	})
	c := f.client()

	_, err := c.CreateVideo(ctx(t), map[string]string{"model": "m-video", "prompt": "x", "fps": "30"}, "my-req")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, &APIError{Method: "POST", Route: "/v1/videos", Status: 400, RequestID: "my-req",
		Body:    APIErrorBody{Message: "m-video supports fps [8 16], got 30", Type: "invalid_request_error", Param: "fps", Code: "unsupported_value"},
		RawBody: ae.RawBody}, ae)
	assert.Equal(t, "POST /v1/videos: HTTP 400 unsupported_value (param fps): m-video supports fps [8 16], got 30 [X-Request-ID my-req]", err.Error())

	err = c.Ready(ctx(t))
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "GET /ready: HTTP 503 not_ready: models are loading [X-Request-ID req_generated]", err.Error())

	f.set(func() {
		f.override["POST /v1/videos"] = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3")
			writeErr(w, 429, "server_busy", "", "queue full")
		}
	})
	_, err = c.CreateVideo(ctx(t), map[string]string{"prompt": "x"}, "")
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "3", ae.RetryAfter)
	assert.Equal(t, "server_busy", ae.Body.Code)
}

func TestNonJSONBody(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() {
		f.override["POST /v1/videos"] = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		}
	})
	f.set(func() {
		f.override["GET /v1/videos/v1"] = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "all good")
		}
	})
	f.set(func() {
		f.override["DELETE /v1/videos/v1"] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"id": "v1", "deleted": false})
		}
	})
	c := f.client()

	_, err := c.CreateVideo(ctx(t), map[string]string{"prompt": "x"}, "r-502")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 502, ae.Status)
	assert.Equal(t, `POST /v1/videos: HTTP 502: no error envelope (Content-Type "text/html"): body "<html>bad gateway</html>" [X-Request-ID r-502]`, err.Error())

	_, err = c.GetVideo(ctx(t), "v1")
	require.Error(t, err)
	assert.False(t, errors.As(err, &ae), "a 2xx answer is not an APIError")
	assert.Contains(t, err.Error(), `GET /v1/videos/v1: HTTP 200: decoding JSON (Content-Type "text/plain"): invalid character`)
	assert.Contains(t, err.Error(), `body "all good" [X-Request-ID req_generated]`)

	err = c.DeleteVideo(ctx(t), "v1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DELETE /v1/videos/v1: HTTP 200: answer")
	assert.Contains(t, err.Error(), "does not say v1 was deleted")

	c.BaseURL = "http://127.0.0.1:1"
	_, err = c.Models(ctx(t))
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "GET /v1/models: "), err.Error())
}

func TestPollCadence(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() { f.doneAfter = 6 })
	c := f.client()
	c.PollEvery = 50 * time.Millisecond
	v, err := c.CreateVideo(ctx(t), map[string]string{"prompt": "x"}, "")
	require.NoError(t, err)
	begin := time.Now()
	v, polls, err := c.WaitVideo(ctx(t), v.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusCompleted, v.Status)
	assert.Equal(t, 6, polls.N)
	assert.Equal(t, 50*time.Millisecond, polls.Every)
	assert.GreaterOrEqual(t, polls.Elapsed, 250*time.Millisecond)
	assert.LessOrEqual(t, polls.Elapsed, time.Since(begin))
	f.mu.Lock()
	times := f.polls[v.ID]
	f.mu.Unlock()
	require.Len(t, times, 6)
	for i := 1; i < len(times); i++ {
		gap := times[i].Sub(times[i-1])
		// A late poll is followed by a shorter gap (the cadence does not drift), never a tight loop.
		assert.Greater(t, gap, 25*time.Millisecond, "poll %d came %v after the previous", i, gap)
		assert.Less(t, gap, 150*time.Millisecond, "poll %d came %v after the previous", i, gap)
	}
	total := times[len(times)-1].Sub(times[0])
	assert.InDelta(t, 250, total.Milliseconds(), 60, "the cadence does not drift")

	c.PollEvery = 0
	f.set(func() { f.doneAfter = 1 })
	v, err = c.CreateVideo(ctx(t), map[string]string{"prompt": "x"}, "")
	require.NoError(t, err)
	_, polls, err = c.WaitVideo(ctx(t), v.ID)
	require.NoError(t, err)
	assert.Equal(t, Polls{N: 1, Every: DefaultPollEvery, Elapsed: polls.Elapsed}, polls)
}

func TestWaitVideoEnds(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	c := f.client()

	// A failed job is an answer, not an error.
	v, err := c.CreateVideo(ctx(t), map[string]string{"prompt": "fail"}, "")
	require.NoError(t, err)
	v, polls, err := c.WaitVideo(ctx(t), v.ID)
	require.NoError(t, err)
	assert.Equal(t, 3, polls.N)
	assert.Equal(t, StatusFailed, v.Status)
	assert.True(t, v.Terminal())
	assert.Equal(t, &api.JobError{Code: "actual_mismatch", Message: "asked 17 frames, got 16"}, v.Error)

	// A non-2xx poll is an error, with the count so far.
	v, err = c.CreateVideo(ctx(t), map[string]string{"prompt": "x"}, "")
	require.NoError(t, err)
	var n atomic.Int32
	f.set(func() {
		f.override["GET /v1/videos/"+v.ID] = func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) < 2 {
				writeJSON(w, 200, map[string]any{"id": v.ID, "status": "in_progress"})
				return
			}
			writeErr(w, 500, "internal", "", "boom")
		}
	})
	_, polls, err = c.WaitVideo(ctx(t), v.ID)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 2, polls.N)
	assert.Contains(t, err.Error(), "waiting for "+v.ID+" (poll 2 after")
	assert.Contains(t, err.Error(), "GET /v1/videos/"+v.ID+": HTTP 500 internal: boom")

	// An unknown status is an error.
	f.set(func() {
		f.override["GET /v1/videos/"+v.ID] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"id": v.ID, "status": "succeeded"})
		}
	})
	_, _, err = c.WaitVideo(ctx(t), v.ID)
	require.ErrorContains(t, err, `unknown status "succeeded"`)

	// The context ends the wait.
	f.set(func() {
		f.override["GET /v1/videos/"+v.ID] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"id": v.ID, "status": "queued"})
		}
	})
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, polls, err = c.WaitVideo(cctx, v.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), `last status "queued"`)
	assert.Greater(t, polls.N, 3)
}

func TestEditB64(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	c := f.client()
	ref := testPNG(t, 5, 4)
	res, err := c.Edit(ctx(t), map[string]string{"model": "m-edit", "prompt": "sepia", "size": "auto"}, ref, "cat.png", "edit-1")
	require.NoError(t, err)
	assert.Equal(t, f.imagePNG, res.PNG)
	assert.Empty(t, res.URL)
	assert.Equal(t, "img_1", res.ID)
	assert.Equal(t, "m-edit", res.Model)
	assert.Equal(t, "3x2", res.Size)
	assert.Equal(t, "png", res.OutputFormat)
	assert.Equal(t, Actual{Width: 3, Height: 2, Steps: 2, Guidance: 1.5, Seed: 7, Precision: "bf16"}, res.Actual)
	assert.Equal(t, Timing{QueueMS: 1, TaskCallWallMS: 12, EncodeMS: 3, TotalMS: 16}, res.Timing)
	assert.Equal(t, 0.012, res.InferenceTimeS)
	assert.Equal(t, "abcd", res.SHA256)
	assert.Nil(t, res.ExpiresAt)
	assert.Contains(t, res.Raw, "data")
	f.mu.Lock()
	assert.Equal(t, map[string]string{"model": "m-edit", "prompt": "sepia", "size": "auto"}, f.fields)
	assert.Equal(t, []string{fmt.Sprintf("image cat.png image/png %d", len(ref))}, f.files)
	assert.Equal(t, "edit-1", f.reqIDs[len(f.reqIDs)-1])
	f.mu.Unlock()

	_, err = c.Edit(ctx(t), map[string]string{"response_format": "empty"}, ref, "cat.png", "")
	require.ErrorContains(t, err, "POST /v1/images/edits: HTTP 200: data[0] has neither b64_json nor url")
}

func TestEditURL(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() { f.apiKey = "k" })
	c := f.client()
	ref := testPNG(t, 5, 4)
	for _, format := range []string{"url", "relative-url"} {
		res, err := c.Edit(ctx(t), map[string]string{"model": "m-edit", "prompt": "p", "response_format": format}, ref, "ref.png", "")
		require.NoError(t, err, format)
		assert.Equal(t, f.imagePNG, res.PNG, format)
		assert.True(t, strings.HasSuffix(res.URL, "/v1/images/img_1/content"), res.URL)
	}
	res, err := c.Edit(ctx(t), map[string]string{"response_format": "url"}, ref, "ref.png", "")
	require.NoError(t, err)
	require.NotNil(t, res.ExpiresAt)
	assert.Equal(t, int64(1795966218), *res.ExpiresAt)
	require.NoError(t, c.DeleteImage(ctx(t), res.ID))

	f.set(func() {
		f.override["GET /v1/images/img_1/content"] = func(w http.ResponseWriter, r *http.Request) {
			writeErr(w, 404, "image_not_found", "id", "image img_1 expired")
		}
	})
	_, err = c.Edit(ctx(t), map[string]string{"response_format": "url"}, ref, "ref.png", "e-404")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "GET /v1/images/img_1/content: HTTP 404 image_not_found (param id): image img_1 expired [X-Request-ID req_generated]", err.Error())
}
