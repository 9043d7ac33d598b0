package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/ledger"
)

// A completed video object and a ledger line as docs/API.md shows them.
const (
	videoJSON = `{"id":"video_1","object":"video","model":"ref-t2v","status":"completed","progress":100,
 "created_at":1795962617,"completed_at":1795962617,"expires_at":1795966217,"error":null,
 "prompt":"p","size":"320x192","seconds":"1.0625",
 "settings":{"prompt":"p","size":"320x192","num_frames":17,"fps":16,"num_inference_steps":4,"guidance":5,"seed":42},
 "url":"http://127.0.0.1:8000/v1/videos/video_1/content",
 "actual":{"num_frames":17,"width":320,"height":192,"fps":16,"duration_s":1.0625,"num_inference_steps":4,"guidance":5,"seed":42,"precision":"fp32"},
 "timing":{"queue_ms":0.1,"task_call_wall_ms":174.0,"handover_ms":0,"encode_wait_ms":0,"encode_ms":63.6,"other_ms":0.5,"total_ms":238.2,"streamed_frames":17},
 "inference_time_s":0.0895,"peak_memory_mb":0,"sha256":"7cc6"}`
	ledgerJSON = `{"time":"2026-11-29T10:00:00Z","event":"job","request_id":"r1","route":"POST /v1/videos","model":"ref-t2v",
 "job_id":"video_1","status":"completed","output":{"sha256":"7cc6","bytes":10,"frames_sha256":"ab","peak_memory_mb":0},
 "timing":{"queue_ms":0.1,"task_call_wall_ms":174.0,"handover_ms":0,"encode_wait_ms":0,"encode_ms":63.6,"other_ms":0.5,"total_ms":238.2,"streamed_frames":17}}`
)

func TestStrictAcceptsTheDocumentedShapes(t *testing.T) {
	var v api.Video
	require.NoError(t, api.Strict([]byte(videoJSON), &v))
	assert.Equal(t, 174.0, v.Timing.TaskCallWallMS)
	assert.Equal(t, 17, v.Timing.StreamedFrames)
	var e ledger.Entry
	require.NoError(t, api.Strict([]byte(ledgerJSON), &e))
	assert.Equal(t, "7cc6", e.Output.SHA256)
}

func TestStrictCatchesDrift(t *testing.T) {
	for name, tc := range map[string]struct {
		doc, old, new string
		into          any
		msg           string
	}{
		"renamed field":         {videoJSON, `"inference_time_s"`, `"inference_s"`, &api.Video{}, `unknown field "inference_s"`},
		"renamed nested field":  {videoJSON, `"task_call_wall_ms"`, `"task_wall_ms"`, &api.Video{}, `unknown field "task_wall_ms"`},
		"dropped field":         {videoJSON, `"status":"completed",`, ``, &api.Video{}, `missing required field status`},
		"dropped nested field":  {videoJSON, `"encode_ms":63.6,`, ``, &api.Video{}, `missing required field timing.encode_ms`},
		"dropped ledger timing": {ledgerJSON, `,"streamed_frames":17`, ``, &ledger.Entry{}, `missing required field timing.streamed_frames`},
		"renamed ledger field":  {ledgerJSON, `"frames_sha256"`, `"frame_sha256"`, &ledger.Entry{}, `unknown field "frame_sha256"`},
		"dropped ledger field":  {ledgerJSON, `"request_id":"r1",`, ``, &ledger.Entry{}, `missing required field request_id`},
		"type changed":          {videoJSON, `"progress":100`, `"progress":"100"`, &api.Video{}, `progress`},
		"trailing data":         {videoJSON, `"sha256":"7cc6"}`, `"sha256":"7cc6"}{}`, &api.Video{}, `data after the value`},
	} {
		doc := strings.Replace(tc.doc, tc.old, tc.new, 1)
		require.NotEqual(t, tc.doc, doc, name)
		err := api.Strict([]byte(doc), tc.into)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.msg, name)
	}
}

func TestStrictRequiresTheErrorEnvelope(t *testing.T) {
	var env api.ErrorEnvelope
	require.NoError(t, api.Strict([]byte(`{"error":{"message":"m","type":"invalid_request_error","param":"fps","code":"unsupported_value"}}`), &env))
	// FastAPI's shape (SGLang) is not the envelope.
	err := api.Strict([]byte(`{"detail":"Video not found"}`), &env)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown field "detail"`)
}
