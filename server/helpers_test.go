package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/internal/proctest"
	"github.com/mediaqual/mediaqual/models/reference"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
	"github.com/mediaqual/mediaqual/server/encode"
)

// fakeTask produces exactly what was asked, optionally after a fixed delay or a gate, so tests
// control timing. lie, when set, alters the output to break the contract.
type fakeTask struct {
	delay   time.Duration
	gate    chan struct{}
	entered chan struct{} // when set, Run sends on it first
	lie     func(*spec.Output)
	seen    func(spec.Request) // when set, Run passes it the request first
}

func (f *fakeTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	start := time.Now()
	if f.seen != nil {
		f.seen(req)
	}
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return spec.Output{}, ctx.Err()
		}
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return spec.Output{}, ctx.Err()
		}
	}
	n := max(1, req.NumFrames)
	out := spec.Output{Actual: spec.Actual{
		NumFrames: req.NumFrames, Width: req.Size.W, Height: req.Size.H, FPS: req.FPS,
		Steps: req.Steps, Guidance: req.Guidance, Seed: req.Seed, Precision: "fp32",
	}}
	if req.FPS > 0 {
		out.Actual.DurationS = float64(req.NumFrames) / float64(req.FPS)
	}
	for i := range n {
		f := image.NewRGBA(image.Rect(0, 0, req.Size.W, req.Size.H))
		for p := 0; p < len(f.Pix); p += 4 {
			f.Pix[p], f.Pix[p+1], f.Pix[p+2], f.Pix[p+3] = uint8(i*9+p), uint8(req.Seed), uint8(p>>8), 255
		}
		out.Frames = append(out.Frames, f)
	}
	if f.lie != nil {
		f.lie(&out)
	}
	out.TaskWall = time.Since(start)
	return out, nil
}

func fakeCheckpoint(id string, caps ...spec.Capability) spec.Checkpoint {
	return spec.Checkpoint{
		ID: id, Family: "test", Profile: "test", Revision: "t1", Precision: "fp32", Capabilities: caps,
		Controls: spec.Controls{
			Sizes: []spec.Size{{W: 64, H: 48}, {W: 32, H: 32}}, AutoSize: true,
			Frames: &spec.FrameRule{Step: 4, Offset: 1, Range: spec.IntRange{Min: 1, Max: 33}},
			FPS:    []int{8, 16}, Steps: spec.IntRange{Min: 1, Max: 10},
			Guidance: spec.FloatRange{Min: 0, Max: 10}, GuidanceParam: "guidance_scale",
		},
		Defaults: spec.Settings{Size: spec.Size{W: 64, H: 48}, NumFrames: 5, FPS: 8, Steps: 2, Guidance: 1, Seed: 7},
	}
}

// env is a server under test with its ledger and artifact directory.
type env struct {
	srv    *server.Server
	http   *httptest.Server
	dir    string
	ledger *syncBuffer
}

type syncBuffer struct{ proctest.Buffer }

// entries parses the ledger so far.
func (s *syncBuffer) entries(t *testing.T) []server.LedgerEntry {
	var out []server.LedgerEntry
	dec := json.NewDecoder(bytes.NewReader(s.Bytes()))
	for dec.More() {
		var e server.LedgerEntry
		require.NoError(t, dec.Decode(&e))
		out = append(out, e)
	}
	return out
}

func referenceModels(t testing.TB) []server.Model {
	var ms []server.Model
	for _, cp := range reference.Checkpoints() {
		task, err := cp.NewTask()
		require.NoError(t, err)
		ms = append(ms, server.Model{Checkpoint: cp, Task: task, Runtime: "in-process"})
	}
	return ms
}

func start(t testing.TB, cfg server.Config) *env {
	t.Helper()
	return startWith(t, cfg, false)
}

// startWith is start, behind the server's own http.Server (HTTPServer: its deadlines and
// connection cap) when bounded. A cfg.Ledger given is kept (e.ledger then stays empty).
func startWith(t testing.TB, cfg server.Config, bounded bool) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), ledger: &syncBuffer{}}
	if cfg.Models == nil {
		cfg.Models = referenceModels(t)
	}
	if cfg.Ledger == nil {
		cfg.Ledger = e.ledger
	}
	cfg.ArtifactDir = e.dir
	e.http = httptest.NewUnstartedServer(nil)
	srv, err := server.New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Load(context.Background()))
	e.srv = srv
	if bounded {
		e.http.Config = srv.HTTPServer()
	} else {
		e.http.Config.Handler = srv.Handler()
	}
	e.http.Start()
	t.Cleanup(func() {
		e.http.Close()
		srv.Close()
	})
	return e
}

// files lists what is in the artifact directory.
func (e *env) files(t testing.TB) []string {
	entries, err := os.ReadDir(e.dir)
	require.NoError(t, err)
	var names []string
	for _, d := range entries {
		names = append(names, d.Name())
	}
	return names
}

type part struct {
	name, filename string
	data           []byte
}

func multipartBody(t testing.TB, fields map[string]string, files ...part) (io.Reader, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		require.NoError(t, mw.WriteField(k, v))
	}
	for _, f := range files {
		w, err := mw.CreateFormFile(f.name, f.filename)
		require.NoError(t, err)
		_, _ = w.Write(f.data)
	}
	require.NoError(t, mw.Close())
	return &buf, mw.FormDataContentType()
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

// apiErr returns the error envelope's body.
func (r response) apiErr(t testing.TB) map[string]any {
	t.Helper()
	m := r.json(t)
	e, ok := m["error"].(map[string]any)
	require.True(t, ok, "not an error envelope: %s", r.body)
	return e
}

func (e *env) do(t testing.TB, method, path, contentType string, body io.Reader, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, body)
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, b}
}

func (e *env) postForm(t testing.TB, path string, fields map[string]string, files ...part) response {
	body, ct := multipartBody(t, fields, files...)
	return e.do(t, "POST", path, ct, body)
}

func (e *env) postJSON(t testing.TB, path string, v any) response {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return e.do(t, "POST", path, "application/json", bytes.NewReader(b))
}

// waitVideo polls until the job leaves queued/in_progress.
func (e *env) waitVideo(t testing.TB, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r := e.do(t, "GET", "/v1/videos/"+id, "", nil)
		require.Equal(t, 200, r.status, "%s", r.body)
		obj := r.json(t)
		if s := obj["status"]; s == "completed" || s == "failed" {
			return obj
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("video %s did not finish", id)
	return nil
}

func pngBytes(t testing.TB, w, h int, c color.RGBA) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetRGBA(x, y, color.RGBA{uint8(int(c.R) + x), uint8(int(c.G) + y), c.B, 255})
		}
	}
	v, err := spec.PackRGBA([]*image.RGBA{img})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, encode.PNG(&buf, v))
	return buf.Bytes()
}

func httptestRecorder(h http.Handler, method, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}
