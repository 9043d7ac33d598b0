package api_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/launch"
	"github.com/mediaqual/mediaqual/harness/ledger"
)

// TestContract starts the real mediaserve and decodes what it answers and what it writes to
// its ledger strictly into the harness's own types: a field the server adds, renames or drops
// without docs/API.md and package api following fails here.
func TestContract(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts mediaserve")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	bin := filepath.Join(dir, "mediaserve")
	require.NoError(t, launch.BuildMediaserve(root, bin))
	ledgerPath := filepath.Join(dir, "ledger.jsonl")
	srv := launch.Start(t, launch.Config{Binary: bin, URLFromStdout: true, Dir: dir, Env: []string{"MEDIAQUAL_ROOT=" + root},
		Args: []string{"-port", "0", "-model", "ref-t2v", "-model", "ref-edit", "-ledger", ledgerPath, "-artifact-dir", filepath.Join(dir, "art")}})

	var models api.ModelList
	listed := get(t, srv.URL+"/v1/models", 200)
	strict(t, listed, &models)
	require.Len(t, models.Data, 2)
	var raw struct {
		Data []struct{ Defaults map[string]any }
	}
	require.NoError(t, json.Unmarshal(listed, &raw))
	for i, m := range models.Data {
		// Defaults name the guidance as a request does (guidance_scale or true_cfg_scale).
		assert.Contains(t, raw.Data[i].Defaults, m.Controls.GuidanceParam, m.ID)
		assert.NotContains(t, raw.Data[i].Defaults, "guidance", m.ID)
		assert.Positive(t, m.Defaults.Guidance, m.ID)
	}

	var v api.Video
	strict(t, post(t, srv.URL+"/v1/videos", "req-video", map[string]string{"model": "ref-t2v", "prompt": "a red ball", "seed": "7"}, nil, 200), &v)
	assert.Equal(t, api.StatusQueued, v.Status)
	deadline := time.Now().Add(time.Minute)
	var body []byte
	for !v.Terminal() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		body = get(t, srv.URL+"/v1/videos/"+v.ID, 200)
		v = api.Video{}
		strict(t, body, &v)
	}
	require.Equal(t, api.StatusCompleted, v.Status, "%+v", v.Error)
	require.NoError(t, check.Settings(v.Settings, v.Actual))
	assert.NotEmpty(t, get(t, v.URL, 200))

	var list api.VideoList
	strict(t, get(t, srv.URL+"/v1/videos?limit=5", 200), &list)
	if assert.Len(t, list.Data, 1) {
		// The list carries the same object as GET /v1/videos/{id}.
		assert.Empty(t, cmp.Diff(v, list.Data[0], cmpopts.IgnoreFields(api.Video{}, "Raw")))
	}

	ref, err := os.ReadFile(filepath.Join(root, "fixtures", "images", "chelsea.png"))
	require.NoError(t, err)
	var e api.Edit
	strict(t, post(t, srv.URL+"/v1/images/edits", "req-edit", map[string]string{"model": "ref-edit", "prompt": "Give it a sepia tone and mirror it"}, ref, 200), &e)
	require.Len(t, e.Data, 1)
	assert.NotNil(t, e.Data[0].B64JSON)

	var env api.ErrorEnvelope
	strict(t, post(t, srv.URL+"/v1/videos", "req-bad", map[string]string{"model": "ref-t2v", "prompt": "p", "fps": "30"}, nil, 400), &env)
	assert.Empty(t, cmp.Diff(api.ErrorBody{Type: "invalid_request_error", Param: "fps", Code: "unsupported_value"}, env.Error,
		cmpopts.IgnoreFields(api.ErrorBody{}, "Message")))

	var del api.Deleted
	strict(t, do(t, http.MethodDelete, srv.URL+"/v1/videos/"+v.ID, "req-delete", 200), &del)
	assert.Empty(t, cmp.Diff(api.Deleted{ID: v.ID, Object: "video.deleted", Deleted: true}, del))

	lines, err := os.ReadFile(ledgerPath)
	require.NoError(t, err)
	byReq := map[string]ledger.Entry{}
	for _, l := range bytes.Split(bytes.TrimSpace(lines), []byte("\n")) {
		var en ledger.Entry
		strict(t, l, &en)
		byReq[en.RequestID+"/"+en.Event] = en
	}
	job := byReq["req-video/job"]
	require.NotNil(t, job.Output, "the video's terminal ledger line")
	// The ledger and the video object must tell the same story.
	lane0 := 0
	assert.Empty(t, cmp.Diff(
		ledger.Entry{Route: "POST /v1/videos", Model: "ref-t2v", JobID: v.ID, Lane: &lane0, Status: "completed", Settings: &v.Settings, Actual: &v.Actual, Timing: &v.Timing},
		job, cmpopts.IgnoreFields(ledger.Entry{}, "Time", "Event", "RequestID", "Inputs", "Output")))
	assert.Equal(t, v.SHA256, job.Output.SHA256)
	assert.Equal(t, e.SHA256, byReq["req-edit/job"].Output.SHA256)
	assert.Equal(t, "unsupported_value", byReq["req-bad/rejected"].Error.Code)
	assert.Equal(t, "deleted", byReq["req-delete/delete"].Status)

	// The same body with one field renamed, as a server drifting from the docs would send it,
	// fails on both sides of the rename.
	err = api.Strict(bytes.Replace(body, []byte(`"task_call_wall_ms"`), []byte(`"task_wall_ms"`), 1), &api.Video{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown field "task_wall_ms"`)
}

func strict(t *testing.T, b []byte, v any) {
	t.Helper()
	require.NoError(t, api.Strict(b, v), "body %s", b)
}

func get(t *testing.T, url string, want int) []byte { return do(t, http.MethodGet, url, "", want) }

func do(t *testing.T, method, url, reqID string, want int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	if reqID != "" {
		req.Header.Set("X-Request-ID", reqID)
	}
	return send(t, req, want)
}

func post(t *testing.T, url, reqID string, fields map[string]string, image []byte, want int) []byte {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		require.NoError(t, mw.WriteField(k, v))
	}
	if image != nil {
		w, err := mw.CreateFormFile("image", "reference.png")
		require.NoError(t, err)
		_, err = w.Write(image)
		require.NoError(t, err)
	}
	require.NoError(t, mw.Close())
	req, err := http.NewRequest(http.MethodPost, url, &buf)
	require.NoError(t, err)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("X-Request-ID", reqID)
	return send(t, req, want)
}

func send(t *testing.T, req *http.Request, want int) []byte {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, "%s %s: %s", req.Method, req.URL, b.Bytes())
	return b.Bytes()
}
