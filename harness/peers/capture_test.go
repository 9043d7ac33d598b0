package peers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/peers"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models"
)

// envCapture, set to a directory, makes TestCaptureExchanges record one exchange per peer there
// (harness/wire/testdata's sglang.json and vllm-omni.json are such captures).
const envCapture = "MEDIAQUAL_CAPTURE_EXCHANGES"

// TestCaptureExchanges records, from each peer's released server, the exchange
// harness/wire's TestRecordedExchanges assesses: a video job (create with one field the
// contract does not define, every poll, content, delete), a refused request and an image edit.
func TestCaptureExchanges(t *testing.T) {
	dir := os.Getenv(envCapture)
	if dir == "" {
		t.Skip(envCapture + " is not set: nothing to capture (the captures are in harness/wire/testdata)")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	python, err := peers.Python(root)
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "render")
	require.NoError(t, peers.BuildRender(root, bin))
	photo, err := os.ReadFile(filepath.Join(root, "fixtures", "images", "coffee.png"))
	require.NoError(t, err)
	start := func(p peers.Peer, id string) string {
		e, err := models.Lookup(id)
		require.NoError(t, err)
		srv, err := peers.Start(peers.Config{Root: root, Python: python, Render: bin, Dir: t.TempDir()}, p, e)
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Stop() })
		return srv.URL
	}
	for _, p := range peers.All {
		x := wire.Exchange{Profile: p.Name, Source: fmt.Sprintf("CAPTURED by harness/peers TestCaptureExchanges from %s's released server (scripts/peers, %s) serving ref-t2v and ref-edit, %s; b64_json shortened", p.Name, p.Profile.Source, time.Now().UTC().Format("2006-01-02"))}
		video := start(p, "ref-t2v")
		create := step(t, "create", http.MethodPost, video, "/v1/videos", map[string]string{"model": "ref-t2v", "prompt": "a red ball",
			"size": "320x192", "num_frames": "17", "fps": "16", "seed": "7", "num_inference_steps": "4", "flow_shift": "3.0"}, nil)
		x.Steps = append(x.Steps, create)
		var job struct{ ID, Status string }
		require.NoError(t, json.Unmarshal(create.Response.Body, &job))
		for {
			poll := step(t, "poll", http.MethodGet, video, "/v1/videos/"+job.ID, nil, nil)
			x.Steps = append(x.Steps, poll)
			require.NoError(t, json.Unmarshal(poll.Response.Body, &job))
			if job.Status == "completed" || job.Status == "failed" {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		x.Steps = append(x.Steps, step(t, "content", http.MethodGet, video, "/v1/videos/"+job.ID+"/content", nil, nil),
			step(t, "error", http.MethodGet, video, "/v1/videos/video_unknown", nil, nil),
			step(t, "delete", http.MethodDelete, video, "/v1/videos/"+job.ID, nil, nil))
		edit := start(p, "ref-edit")
		x.Steps = append(x.Steps, step(t, "edit", http.MethodPost, edit, "/v1/images/edits",
			map[string]string{"model": "ref-edit", "prompt": "Make the photo grayscale", "size": "256x256", "seed": "3"}, photo))
		b, err := json.MarshalIndent(x, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, p.Name+".json"), append(b, '\n'), 0o644))
	}
}

// step sends one request (multipart fields and an optional image) and records it.
func step(t *testing.T, name, method, base, path string, fields map[string]string, image []byte) wire.Step {
	var st wire.Step
	st.Step = name
	st.Request.Method, st.Request.Path, st.Request.Fields = method, path, fields
	var body io.Reader
	if fields != nil {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			require.NoError(t, mw.WriteField(k, fields[k]))
		}
		if image != nil {
			w, err := mw.CreateFormFile("image", "coffee.png")
			require.NoError(t, err)
			_, err = w.Write(image)
			require.NoError(t, err)
			st.Request.Files = []string{"image"}
		}
		require.NoError(t, mw.Close())
		body, st.Request.ContentType = &buf, "multipart/form-data"
	}
	req, err := http.NewRequest(method, base+path, body)
	require.NoError(t, err)
	if fields != nil {
		req.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary(st, body))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	st.Response.Status, st.Response.ContentType = resp.StatusCode, resp.Header.Get("Content-Type")
	if json.Valid(b) {
		st.Response.Body = shorten(t, b)
	}
	return st
}

// boundary reads the multipart boundary back from the body written.
func boundary(_ wire.Step, body io.Reader) string {
	b := body.(*bytes.Buffer).Bytes()
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	return string(bytes.TrimPrefix(line, []byte("--")))
}

// shorten cuts every data[].b64_json to 40 characters.
func shorten(t *testing.T, b []byte) json.RawMessage {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return b
	}
	data, ok := m["data"].([]any)
	if !ok {
		return b
	}
	for _, d := range data {
		if item, ok := d.(map[string]any); ok {
			if s, ok := item["b64_json"].(string); ok && len(s) > 40 {
				item["b64_json"] = s[:40]
			}
		}
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}
