package client

import (
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/wire"
)

// vLLM-Omni answers the poll of a failed job with the error's HTTP status and the job
// (api_server.retrieve_video): the poll is the failed job, so WaitVideo ends on it with the
// job's error, not with an error of its own (issue #38 item 8).
func TestFailedJobPolledWithNon2xx(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() {
		f.override["GET /v1/videos/v9"] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 500, map[string]any{"id": "v9", "object": "video", "status": "failed",
				"error": map[string]any{"code": 500, "message": "stage failed"}})
		}
		f.override["GET /v1/videos/other"] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 500, map[string]any{"id": "v9", "status": "failed"}) // another job's body
		}
	})
	c := f.client()
	c.Profile = wire.VLLMOmni
	v, _, err := c.WaitVideo(ctx(t), "v9")
	require.NoError(t, err)
	assert.Equal(t, StatusFailed, v.Status)
	require.NotNil(t, v.Error)
	assert.Equal(t, "stage failed", v.Error.Message)

	_, err = c.GetVideo(ctx(t), "other")
	var ae *APIError
	require.ErrorAs(t, err, &ae, "a non-2xx answer that is not this failed job stays an error")
	assert.Equal(t, 500, ae.Status)
}

// SGLang answers a delete with the job at status "deleted" (video_api.delete_video); with its
// profile that is a delete, and with the contract's it is not (issue #38 item 4).
func TestDeleteAnsweredWithTheJob(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() {
		f.override["DELETE /v1/videos/v1"] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"id": "v1", "object": "video", "status": "deleted"})
		}
		f.override["DELETE /v1/videos/v2"] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"id": "v2", "object": "video", "status": "completed"})
		}
	})
	c := f.client()
	c.Profile = wire.SGLang
	require.NoError(t, c.DeleteVideo(ctx(t), "v1"))
	err := c.DeleteVideo(ctx(t), "v2")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `is not job v2 at status "deleted"`)

	c.Profile = wire.Mediaserve
	require.Error(t, c.DeleteVideo(ctx(t), "v1"), "the contract's delete answer is {id, object: video.deleted, deleted: true}")
}

// vLLM's error envelope has an integer code and a null or "body.<field>" param; it is an
// envelope all the same (issue #38 item 9).
func TestNumericErrorCode(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() {
		f.override["POST /v1/videos"] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 400, map[string]any{"error": map[string]any{"message": "Field required", "type": "Bad Request", "param": "body.prompt", "code": 400}})
		}
		f.override["GET /v1/videos/gone"] = func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 404, map[string]any{"error": map[string]any{"message": "Video not found", "type": "Not Found", "param": nil, "code": 404}})
		}
	})
	c := f.client()
	_, err := c.CreateVideo(ctx(t), map[string]string{"model": "m"}, "")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, APIErrorBody{Message: "Field required", Type: "Bad Request", Param: "body.prompt", Code: "400"}, ae.Body)
	assert.Equal(t, "prompt", wire.VLLMOmni.Field(ae.Body.Param))

	_, err = c.GetVideo(ctx(t), "gone")
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, APIErrorBody{Message: "Video not found", Type: "Not Found", Code: "404"}, ae.Body)
}

// A 401 says which setting gives the suite credentials (issue #41).
func TestUnauthorizedHint(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.set(func() { f.apiKey = "sekret" })
	c := f.client()
	c.APIKey = ""
	_, err := c.Models(ctx(t))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP 401 unauthorized")
	assert.Contains(t, err.Error(), "set MEDIAQUAL_API_KEY")
}
