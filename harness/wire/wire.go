// Package wire describes how each OpenAI-compatible media server speaks (its routes, field
// names, job statuses, timing and error shapes) and turns a server's departures from the
// mediaqual contract (docs/API.md) into named findings instead of failures to parse. The
// profiles of SGLang diffusion and vLLM-Omni are read from their sources; each cites the file
// and commit it follows. Nothing here knows a model.
package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/mediaqual/mediaqual/harness/api"
)

// Finding is one departure from the contract, named so a result row can list it.
type Finding struct {
	Name   string // stable, e.g. "error-envelope"
	Detail string
}

func (f Finding) String() string { return f.Name + ": " + f.Detail }

// Profile is one server's dialect of the media API.
type Profile struct {
	Name   string
	Source string // the source files and commit this profile follows
	// Routes, with {id} for the job id.
	CreateVideo, PollVideo, VideoContent, DeleteVideo, EditImage string
	// CreateEncodings are the bodies POST CreateVideo accepts: "multipart", "json".
	CreateEncodings []string
	// Statuses maps each status the server can report to the contract's status; a status
	// not listed is a finding.
	Statuses map[string]string
	// TaskTime names the field that carries the Task-call time, in the order to try:
	// "timing.task_call_wall_ms" (ms) or "inference_time_s" (s).
	TaskTime []string
	// TaskTimeNote says what the server's time field measures, when it is not the Task call.
	TaskTimeNote string
}

// Video is a video object in the contract's terms, whatever server sent it.
type Video struct {
	ID, Status string // Status is the contract's (queued|in_progress|completed|failed)
	Progress   int
	Seconds    string
	Size       string
	Error      *api.JobError
	Actual     *api.Actual // nil: the server does not say what it produced
	TaskTimeS  float64     // NaN: no Task time reported
	TaskTimeOf string      // the field TaskTimeS came from
}

// Profiles of the servers the suite knows.
var (
	Mediaserve = Profile{
		Name: "mediaserve", Source: "docs/API.md",
		CreateVideo: "POST /v1/videos", PollVideo: "GET /v1/videos/{id}", VideoContent: "GET /v1/videos/{id}/content",
		DeleteVideo: "DELETE /v1/videos/{id}", EditImage: "POST /v1/images/edits",
		CreateEncodings: []string{"multipart", "json"},
		Statuses:        identity(api.StatusQueued, api.StatusInProgress, api.StatusCompleted, api.StatusFailed),
		TaskTime:        []string{"timing.task_call_wall_ms", "inference_time_s"},
	}
	// SGLang follows mickqian/sglang@e339c83f (upstream main, 2026-07-07),
	// python/sglang/multimodal_gen/runtime/entrypoints/openai/{video_api,image_api,protocol,utils}.py.
	SGLang = Profile{
		Name: "sglang", Source: "mickqian/sglang@e339c83f python/sglang/multimodal_gen/runtime/entrypoints/openai/",
		CreateVideo: "POST /v1/videos", PollVideo: "GET /v1/videos/{id}", VideoContent: "GET /v1/videos/{id}/content",
		DeleteVideo: "DELETE /v1/videos/{id}", EditImage: "POST /v1/images/edits",
		CreateEncodings: []string{"multipart", "json"},
		// _dispatch_job_async sets only queued -> completed|failed; delete_video answers the
		// job with status "deleted".
		Statuses: identity(api.StatusQueued, api.StatusCompleted, api.StatusFailed),
		TaskTime: []string{"inference_time_s"},
		// utils.add_common_data_to_response: result.metrics.total_duration_s, the whole pipeline.
		TaskTimeNote: "inference_time_s is the pipeline's total_duration_s, not the Task call alone",
	}
	// VLLMOmni follows rahul-steiger-nv/vllm-omni@8219c01b (2026-07-22),
	// vllm_omni/entrypoints/openai/{api_server.py,protocol/videos.py,protocol/images.py}; its
	// HTTPException answers go through vLLM's http_exception_handler
	// (vllm-project/vllm vllm/entrypoints/serve/utils/server_utils.py @0753ceeb).
	VLLMOmni = Profile{
		Name: "vllm-omni", Source: "rahul-steiger-nv/vllm-omni@8219c01b vllm_omni/entrypoints/openai/",
		CreateVideo: "POST /v1/videos", PollVideo: "GET /v1/videos/{id}", VideoContent: "GET /v1/videos/{id}/content",
		DeleteVideo: "DELETE /v1/videos/{id}", EditImage: "POST /v1/images/edits",
		CreateEncodings: []string{"multipart"}, // create_video takes Depends(_parse_video_form)
		Statuses:        identity(api.StatusQueued, api.StatusInProgress, api.StatusCompleted, api.StatusFailed),
		TaskTime:        []string{"inference_time_s"},
		// _run_video_generation_job: perf_counter around generate_video_bytes and the save.
		TaskTimeNote: "inference_time_s spans generation and saving the file, not the Task call alone",
	}
)

// ByName finds a profile.
func ByName(name string) (Profile, error) {
	for _, p := range []Profile{Mediaserve, SGLang, VLLMOmni} {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("no wire profile %q (have mediaserve, sglang, vllm-omni)", name)
}

func identity(s ...string) map[string]string {
	m := map[string]string{}
	for _, x := range s {
		m[x] = x
	}
	return m
}

// Path fills a route's {id}; it returns the method and the path.
func (p Profile) Path(route, id string) (method, path string) {
	method, path, _ = strings.Cut(route, " ")
	return method, strings.ReplaceAll(path, "{id}", id)
}

// ParseVideo reads a video object in p's dialect. Only a body that is not a JSON object is an
// error; everything else the contract wants and the body lacks is a finding.
func (p Profile) ParseVideo(body []byte) (Video, []Finding, error) {
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		return Video{}, nil, fmt.Errorf("%s video object: %w", p.Name, err)
	}
	var fs []Finding
	v := Video{TaskTimeS: math.NaN()}
	v.ID, _ = raw["id"].(string)
	v.Seconds, _ = raw["seconds"].(string)
	v.Size, _ = raw["size"].(string)
	status, _ := raw["status"].(string)
	if v.Status = p.Statuses[status]; v.Status == "" {
		fs = append(fs, Finding{"unknown-status", fmt.Sprintf("status %q is none of queued, in_progress, completed, failed", status)})
	}
	if n, ok := raw["progress"].(float64); ok {
		v.Progress = int(n)
	}
	if e, ok := raw["error"].(map[string]any); ok {
		v.Error = &api.JobError{}
		v.Error.Message, _ = e["message"].(string)
		switch c := e["code"].(type) {
		case string:
			v.Error.Code = c
		case float64:
			v.Error.Code = strconv.Itoa(int(c))
			fs = append(fs, Finding{"job-error-code", fmt.Sprintf("a failed job's error code is the number %v, not a named code", c)})
		default:
			fs = append(fs, Finding{"job-error-code", "a failed job's error has no code"})
		}
	}
	if a, ok := raw["actual"]; ok && a != nil {
		b, _ := json.Marshal(a)
		var act api.Actual
		if err := json.Unmarshal(b, &act); err == nil {
			v.Actual = &act
		}
	}
	v.TaskTimeS, v.TaskTimeOf = taskTime(raw, p.TaskTime)
	return v, fs, nil
}

// taskTime reads the first of fields that is a number; NaN when none is.
func taskTime(raw map[string]any, fields []string) (float64, string) {
	for _, f := range fields {
		var x any = raw
		for _, k := range strings.Split(f, ".") {
			m, _ := x.(map[string]any)
			x = m[k]
		}
		if n, ok := x.(float64); ok {
			if strings.HasSuffix(f, "_ms") {
				n /= 1000
			}
			return n, f
		}
	}
	return math.NaN(), ""
}

// ParseError reads a non-2xx body as the contract's error envelope. A FastAPI {"detail": …}
// body, a numeric code or a missing code are findings; the returned body carries what could
// be read (the HTTP status as the code when there is no other).
func ParseError(status int, body []byte) (api.ErrorBody, []Finding) {
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		return api.ErrorBody{Message: string(body), Code: strconv.Itoa(status)},
			[]Finding{{"error-envelope", fmt.Sprintf("HTTP %d body is not JSON: %.80q", status, body)}}
	}
	env, ok := raw["error"].(map[string]any)
	if !ok {
		msg := fmt.Sprint(raw["detail"])
		keys := make([]string, 0, len(raw))
		for k := range raw {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return api.ErrorBody{Message: msg, Code: strconv.Itoa(status)},
			[]Finding{{"error-envelope", fmt.Sprintf("HTTP %d answers {%s}, not {\"error\": {message, type, param, code}}", status, strings.Join(keys, ", "))}}
	}
	var e api.ErrorBody
	var fs []Finding
	e.Message, _ = env["message"].(string)
	e.Type, _ = env["type"].(string)
	e.Param, _ = env["param"].(string)
	switch c := env["code"].(type) {
	case string:
		e.Code = c
	case float64:
		e.Code = strconv.Itoa(int(c))
		fs = append(fs, Finding{"error-code", fmt.Sprintf("HTTP %d: error.code is the number %v, not a named code such as video_not_found", status, c)})
	default:
		e.Code = strconv.Itoa(status)
		fs = append(fs, Finding{"error-code", fmt.Sprintf("HTTP %d: error has no code", status)})
	}
	return e, fs
}
