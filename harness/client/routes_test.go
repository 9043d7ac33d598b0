package client

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/wire"
)

// A server on other routes, taking only JSON on create, is spoken to through its profile: every
// route the profile names (create, list, poll, content, delete, edit) and create's encoding
// come from it. The same client with the contract's routes gets 404 from it. (Before, the
// client hard-coded /v1/... and multipart whatever the profile said, and Client had no Profile.)
func TestProfileDrivesRoutesAndEncoding(t *testing.T) {
	png := testPNG(t, 4, 4)
	var created map[string]string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v2/clips", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" {
			writeErr(w, 415, "unsupported_media_type", "", "JSON only")
			return
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&created))
		writeJSON(w, 200, map[string]any{"id": "clip-1", "object": "video", "status": "queued"})
	})
	mux.HandleFunc("GET /api/v2/clips", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"object": "list", "data": []any{map[string]any{"id": "clip-1", "status": "completed"}}})
	})
	mux.HandleFunc("GET /api/v2/clips/{id}/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"id": r.PathValue("id"), "object": "video", "status": "completed", "progress": 100})
	})
	mux.HandleFunc("GET /api/v2/clips/{id}/file", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "video/mp4")
		_, _ = io.WriteString(w, "mp4 bytes")
	})
	mux.HandleFunc("POST /api/v2/clips/{id}/remove", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"id": r.PathValue("id"), "object": "video.deleted", "deleted": true})
	})
	mux.HandleFunc("POST /api/v2/edit", func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := r.FormFile("image"); err != nil {
			writeErr(w, 400, "invalid_value", "image", err.Error())
			return
		}
		writeJSON(w, 200, map[string]any{"data": []any{map[string]any{"b64_json": base64.StdEncoding.EncodeToString(png)}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	profile := wire.Profile{Name: "other-routes",
		CreateVideo: "POST /api/v2/clips", PollVideo: "GET /api/v2/clips/{id}/status", VideoContent: "GET /api/v2/clips/{id}/file",
		DeleteVideo: "POST /api/v2/clips/{id}/remove", EditImage: "POST /api/v2/edit", CreateEncodings: []string{"json"}}

	c := &Client{BaseURL: srv.URL, Profile: profile}
	v, err := c.CreateVideo(ctx(t), map[string]string{"model": "m", "prompt": "a red ball", "seed": "42"}, "")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"model": "m", "prompt": "a red ball", "seed": "42"}, created, "create's fields, as JSON")
	list, err := c.ListVideos(ctx(t), 8)
	require.NoError(t, err)
	require.Len(t, list, 1)
	v, err = c.GetVideo(ctx(t), v.ID)
	require.NoError(t, err)
	assert.Equal(t, StatusCompleted, v.Status)
	body, ct, err := c.Content(ctx(t), v.ID)
	require.NoError(t, err)
	assert.Equal(t, "mp4 bytes", string(body))
	assert.Equal(t, "video/mp4", ct)
	require.NoError(t, c.DeleteVideo(ctx(t), v.ID))
	e, err := c.Edit(ctx(t), map[string]string{"model": "m", "prompt": "invert"}, png, "ref.png", "")
	require.NoError(t, err)
	assert.Equal(t, png, e.PNG)

	contract := &Client{BaseURL: srv.URL} // wire.Mediaserve's routes
	_, err = contract.CreateVideo(ctx(t), map[string]string{"model": "m", "prompt": "p"}, "")
	var apiErr *APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, 404, apiErr.Status)
	assert.Equal(t, "/v1/videos", apiErr.Route)
	_, _, err = contract.Content(ctx(t), "clip-1")
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, "/v1/videos/clip-1/content", apiErr.Route)

	none := &Client{BaseURL: srv.URL, Profile: wire.Profile{Name: "xml-only", CreateVideo: "POST /x", CreateEncodings: []string{"xml"}}}
	_, err = none.CreateVideo(ctx(t), map[string]string{"model": "m"}, "")
	assert.ErrorContains(t, err, "accepts no encoding this client writes")
}
