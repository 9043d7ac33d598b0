package wire_test

import (
	"encoding/json"
	"math"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/wire"
)

func names(fs []wire.Finding) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

// Each recorded exchange parses, and its findings are exactly these (in order of appearance).
func TestRecordedExchanges(t *testing.T) {
	for file, want := range map[string][]string{
		// Captured from the real mediaserve: the contract itself, so nothing to report.
		"mediaserve.json": {},
		// Captured from the peers' released servers (harness/peers TestCaptureExchanges). SGLang
		// reports in_progress with the scheduler's per-step progress (no "no-in-progress", no
		// "progress-jumps"); vLLM-Omni reports what it produced in part.
		"sglang.json": {"shape", "unknown-field-accepted", "seconds-echo", "error-envelope", "delete-shape", "shape",
			"edit-unconfirmed", "edit-format", "settings-unconfirmed", "timing-not-task"},
		"vllm-omni.json": {"shape", "unknown-field-accepted", "seconds-echo", "error-code", "shape", "edit-unconfirmed",
			"edit-no-timing", "progress-jumps", "settings-partly-confirmed", "timing-not-task"},
	} {
		x, err := wire.ReadExchange(filepath.Join("testdata", file))
		require.NoError(t, err, file)
		fs, err := wire.Assess(x)
		require.NoError(t, err, file)
		for _, f := range fs {
			t.Logf("%s: %s", file, f)
		}
		assert.Empty(t, cmp.Diff(want, names(fs)), file)
	}
}

func TestParseError(t *testing.T) {
	e, fs := wire.ParseError(400, []byte(`{"error":{"message":"m","type":"invalid_request_error","param":"fps","code":"unsupported_value"}}`))
	assert.Empty(t, fs)
	assert.Equal(t, "unsupported_value", e.Code)
	for name, tc := range map[string]struct {
		body, finding string
	}{
		"fastapi detail": {`{"detail":"Video not found"}`, "error-envelope"},
		"not json":       {`Internal Server Error`, "error-envelope"},
		"numeric code":   {`{"error":{"message":"m","type":"Not Found","param":null,"code":404}}`, "error-code"},
		"no code":        {`{"error":{"message":"m","type":"x"}}`, "error-code"},
	} {
		e, fs := wire.ParseError(404, []byte(tc.body))
		assert.Equal(t, []string{tc.finding}, names(fs), name)
		assert.NotEmpty(t, e.Code, name) // the status stands in, so a caller always has a code
	}
}

func TestParseVideoTiming(t *testing.T) {
	v, fs, err := wire.Mediaserve.ParseVideo([]byte(`{"id":"v","status":"completed","timing":{"task_call_wall_ms":89.5},"inference_time_s":0.0895}`))
	require.NoError(t, err)
	assert.Empty(t, fs)
	assert.Equal(t, "timing.task_call_wall_ms", v.TaskTimeOf)
	assert.InDelta(t, 0.0895, v.TaskTimeS, 1e-12)

	v, _, err = wire.SGLang.ParseVideo([]byte(`{"id":"v","status":"completed","inference_time_s":null}`))
	require.NoError(t, err)
	assert.True(t, math.IsNaN(v.TaskTimeS), "null is no time, not zero")

	// sglang 0.5.23's video_progress.apply_progress reports in_progress with the scheduler's
	// per-step progress (issue #38 item 2).
	v, fs, err = wire.SGLang.ParseVideo([]byte(`{"id":"v","status":"in_progress","progress":50}`))
	require.NoError(t, err)
	assert.Empty(t, names(fs))
	assert.Equal(t, "in_progress", v.Status)
	assert.Equal(t, 50, v.Progress)

	_, _, err = wire.SGLang.ParseVideo([]byte(`<html>`))
	require.Error(t, err)
}

// The mediaserve exchange, broken one way at a time, yields exactly the finding for that way.
func TestAssessCatchesEachDeparture(t *testing.T) {
	x, err := wire.ReadExchange(filepath.Join("testdata", "mediaserve.json"))
	require.NoError(t, err)
	edit := func(step int, f func(map[string]any)) func(wire.Exchange) wire.Exchange {
		return func(x wire.Exchange) wire.Exchange {
			var body map[string]any
			require.NoError(t, json.Unmarshal(x.Steps[step].Response.Body, &body))
			f(body)
			b, err := json.Marshal(body)
			require.NoError(t, err)
			x.Steps = append([]wire.Step(nil), x.Steps...)
			x.Steps[step].Response.Body = b
			return x
		}
	}
	const create, poll, content, errStep, del, editStep = 0, 1, 2, 3, 4, 5
	for name, tc := range map[string]struct {
		broken func(wire.Exchange) wire.Exchange
		want   []string
	}{
		"no timing":             {edit(poll, func(b map[string]any) { delete(b, "timing"); delete(b, "inference_time_s") }), []string{"no-timing"}},
		"only inference_time_s": {edit(poll, func(b map[string]any) { delete(b, "timing") }), []string{"timing-not-task"}},
		"no actual":             {edit(poll, func(b map[string]any) { delete(b, "actual") }), []string{"settings-unconfirmed"}},
		"size changed":          {edit(create, func(b map[string]any) { b["size"] = "832x480" }), []string{"setting-changed"}},
		"seconds rounded":       {edit(create, func(b map[string]any) { b["seconds"] = "1" }), []string{"seconds-echo"}},
		"renamed field":         {edit(poll, func(b map[string]any) { b["inference_s"] = b["inference_time_s"]; delete(b, "inference_time_s") }), []string{"shape"}},
		"odd status":            {edit(poll, func(b map[string]any) { b["status"] = "succeeded" }), []string{"unknown-status"}},
		"detail error":          {edit(errStep, func(b map[string]any) { delete(b, "error"); b["detail"] = "bad fps" }), []string{"error-envelope"}},
		"delete echoes job":     {edit(del, func(b map[string]any) { b["object"] = "video"; b["status"] = "deleted" }), []string{"delete-shape"}},
		"edit without actual":   {edit(editStep, func(b map[string]any) { delete(b, "actual") }), []string{"shape", "edit-unconfirmed"}},
		"progress jumps": {func(x wire.Exchange) wire.Exchange {
			x = edit(poll, func(b map[string]any) { b["status"], b["progress"] = "in_progress", 0 })(x)
			x.Steps = append(x.Steps[:poll+1:poll+1], append([]wire.Step{x.Steps[create]}, x.Steps[poll+1:]...)...)
			x.Steps[poll+1].Step, x.Steps[poll+1].Response.Body = "poll", mustBody(t, "mediaserve.json", poll)
			return x
		}, []string{"progress-jumps"}},
		"failed job, HTTP 500, no code": {func(x wire.Exchange) wire.Exchange {
			x = edit(poll, func(b map[string]any) {
				b["status"], b["error"] = "failed", map[string]any{"message": "boom"}
				for _, k := range []string{"actual", "url", "sha256", "inference_time_s", "peak_memory_mb"} {
					delete(b, k)
				}
			})(x)
			x.Steps[poll].Response.Status = 500
			x.Steps[content].Response.Status, x.Steps[content].Response.ContentType = 422, ""
			return x
		}, []string{"failed-job-non-2xx", "job-error-code", "shape", "content-not-ready-status"}},
		"content type": {func(x wire.Exchange) wire.Exchange {
			x.Steps = append([]wire.Step(nil), x.Steps...)
			x.Steps[content].Response.ContentType = "application/octet-stream"
			return x
		}, []string{"content-type"}},
		"no content": {func(x wire.Exchange) wire.Exchange {
			x.Steps = append([]wire.Step(nil), x.Steps...)
			x.Steps[content].Response.Status, x.Steps[content].Response.ContentType = 404, ""
			return x
		}, []string{"no-content"}},
		"unknown field accepted": {func(x wire.Exchange) wire.Exchange {
			x.Steps = append([]wire.Step(nil), x.Steps...)
			f := map[string]string{"flow_shift": "3"}
			for k, v := range x.Steps[create].Request.Fields {
				f[k] = v
			}
			x.Steps[create].Request.Fields = f
			return x
		}, []string{"unknown-field-accepted"}},
	} {
		fs, err := wire.Assess(tc.broken(x))
		require.NoError(t, err, name)
		assert.Empty(t, cmp.Diff(tc.want, names(fs)), "%s: %v", name, fs)
	}
	// The original is untouched by the edits above.
	fs, err := wire.Assess(x)
	require.NoError(t, err)
	assert.Empty(t, fs)
}

func mustBody(t *testing.T, file string, step int) json.RawMessage {
	x, err := wire.ReadExchange(filepath.Join("testdata", file))
	require.NoError(t, err)
	return x.Steps[step].Response.Body
}

func TestAssessRefusesUnreadable(t *testing.T) {
	_, err := wire.Assess(wire.Exchange{Profile: "tgi"})
	require.ErrorContains(t, err, "no wire profile")
	_, err = wire.Assess(wire.Exchange{Profile: "sglang", Steps: []wire.Step{{Step: "teleport"}}})
	require.ErrorContains(t, err, "unknown step")
}

// What a server's /v1/models says is read through its profile; what it never says is named, so
// the qualification makes it a limit rather than a failed reconciliation (issue #38 item 1).
func TestParseModel(t *testing.T) {
	for name, tc := range map[string]struct {
		p      wire.Profile
		body   string
		caps   []string
		prec   string
		unsaid []string
	}{
		"mediaserve": {wire.Mediaserve, `{"id":"ref-t2v","capabilities":["text_to_video"],"revision":"ref-v1","precision":"fp32","profile":"reference/L0"}`,
			[]string{"text_to_video"}, "fp32", nil},
		"sglang (common_api._build_model_card)": {wire.SGLang, `{"id":"ref-edit","owned_by":"sglang","task_type":"I2I","supported_task_types":["I2I","T2I"],"dit_precision":"fp32"}`,
			[]string{"image_edit"}, "fp32", []string{"revision", "profile"}},
		"vllm-omni (vllm ModelCard)": {wire.VLLMOmni, `{"id":"ref-t2v","object":"model","owned_by":"vllm","root":"Wan-AI/Wan2.1-T2V-1.3B-Diffusers"}`,
			nil, "", []string{"capabilities", "revision", "precision", "profile"}},
	} {
		var raw map[string]any
		require.NoError(t, json.Unmarshal([]byte(tc.body), &raw), name)
		m, unsaid := tc.p.ParseModel(raw)
		assert.Equal(t, tc.caps, m.Capabilities, name)
		assert.Equal(t, tc.prec, m.Precision, name)
		assert.Equal(t, tc.unsaid, unsaid, name)
		if tc.p.Name == "mediaserve" {
			assert.Equal(t, "ref-v1", m.Revision)
			assert.Equal(t, "reference/L0", m.Profile)
		}
	}
}

// vLLM-Omni reports the fps, frame count and duration it produced on the job; the profile reads
// them and holds them to what was asked (issue #38 item 7).
func TestProducedAsAsked(t *testing.T) {
	v, fs, err := wire.VLLMOmni.ParseVideo([]byte(`{"id":"v","status":"completed","fps":16.0,"num_frames":17,"duration_s":1.0625}`))
	require.NoError(t, err)
	assert.Empty(t, fs)
	assert.Equal(t, []string{"num_frames", "fps", "duration_s"}, v.Said)
	assert.Equal(t, 17, v.Produced.NumFrames)
	assert.Equal(t, 16, v.Produced.FPS)
	assert.Empty(t, wire.ProducedAsAsked(map[string]string{"num_frames": "17", "fps": "16"}, v))
	assert.Equal(t, []string{"setting-changed", "setting-changed"}, names(wire.ProducedAsAsked(map[string]string{"num_frames": "21", "fps": "24"}, v)))

	v, _, err = wire.SGLang.ParseVideo([]byte(`{"id":"v","status":"completed","fps":16,"num_frames":17}`))
	require.NoError(t, err)
	assert.Empty(t, v.Said, "SGLang's job object does not report what it produced")
}

// vLLM names a form field "body.<field>" in error.param (issue #38 item 9).
func TestField(t *testing.T) {
	assert.Equal(t, "fps", wire.VLLMOmni.Field("body.fps"))
	assert.Equal(t, "body.fps", wire.SGLang.Field("body.fps"))
	assert.Equal(t, "fps", wire.Mediaserve.Field("fps"))
}
