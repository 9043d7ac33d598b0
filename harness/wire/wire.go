// Package wire describes how each OpenAI-compatible media server speaks (its routes, field
// names, job statuses, timing and error shapes) and turns a server's departures from the
// mediaqual contract (docs/API.md) into named findings instead of failures to parse. The
// profiles of SGLang diffusion and vLLM-Omni are read from their released packages (sglang
// 0.5.23, vllm-omni 0.30.0 on vllm 0.30.0); each claim cites the file it comes from, and
// harness/peers' TestProfilesHoldToReleasedSource holds the claims to those files as installed.
// Nothing here knows a model.
package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
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
	// Deleted is the status a delete answers the job object with, for a server that answers a
	// delete with the job rather than the contract's {id, object: "video.deleted", deleted: true};
	// "" for the contract's answer.
	Deleted string
	// ParamPrefix is what the server puts before a request field's name in error.param (vLLM's
	// validation errors name "body.fps").
	ParamPrefix string
	// Produced are the fields of the actual the server reports on the job object itself, at
	// its top level (num_frames, fps, duration_s), where it reports no actual object.
	Produced []string
	// Models is how the server's GET /v1/models describes a model.
	Models ModelCard
	// OwnEncoder is a server that encodes clips with an encoder of its own, not the contract's:
	// its decoded frames cannot equal the native path's, and identity holds them to the native
	// raw frames within the floors any encoder meets (check frame-psnr).
	OwnEncoder bool
	// Departs are the rules of the job API's model (harness/jobmodel, by check) the server's
	// released code breaks, each with the source that breaks it: a violation of one is that
	// peer's finding, not a failure of the row. harness/peers' TestProfilesHoldToReleasedSource
	// holds each to the installed source.
	Departs map[string]Departure
}

// Departure is a rule a server's released code breaks: the file (under site-packages), the
// line of source that breaks it, and how.
type Departure struct {
	File, Source, Why string
}

// ModelCard names the fields of a server's /v1/models entry that carry the contract's model
// declaration; "" is a field the server's list never says (the qualification names it as a
// limit: what a server cannot say is not held against it, nor taken on trust).
type ModelCard struct {
	Capabilities string // a list of capabilities, or of task types (TaskTypes)
	// TaskTypes maps the server's task types to the contract's capabilities; nil: the list holds
	// the contract's capabilities. A task type not mapped is not a capability the contract has.
	TaskTypes                    map[string]string
	Revision, Precision, Profile string
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
	// Produced is what the server reports it produced on the job object itself (the profile's
	// Produced fields); only Said is meaningful.
	Produced api.Actual
	Said     []string // the Produced fields the object carries, in Profile.Produced's order
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
		Models:          ModelCard{Capabilities: "capabilities", Revision: "revision", Precision: "precision", Profile: "profile"},
	}
	// SGLang is sglang 0.5.23's diffusion server (sglang/multimodal_gen/runtime/entrypoints/).
	SGLang = Profile{
		Name: "sglang", Source: "sglang 0.5.23 (PyPI): sglang/multimodal_gen/runtime/entrypoints/openai/{video_api,video_progress,image_api,common_api,utils}.py",
		CreateVideo: "POST /v1/videos", PollVideo: "GET /v1/videos/{id}", VideoContent: "GET /v1/videos/{id}/content",
		DeleteVideo: "DELETE /v1/videos/{id}", EditImage: "POST /v1/images/edits",
		// video_api.create_video reads multipart/form-data or a JSON body.
		CreateEncodings: []string{"multipart", "json"},
		// video_api._video_job_from_sampling queued; video_progress.apply_progress in_progress
		// (with the scheduler's per-step progress); video_api._dispatch_job_async completed or
		// failed; video_api.delete_video answers the job with status "deleted" (Deleted).
		Statuses: identity(api.StatusQueued, api.StatusInProgress, api.StatusCompleted, api.StatusFailed),
		Deleted:  "deleted",
		// utils.add_common_data_to_response, on videos and image edits alike:
		// result.metrics.total_duration_s, the whole pipeline.
		TaskTime:     []string{"inference_time_s"},
		TaskTimeNote: "inference_time_s is the pipeline's total_duration_s, not the Task call alone",
		// common_api._build_model_card: id, supported_task_types, dit_precision, vae_precision;
		// no revision and no profile. Task types: configs/task_type.py ModelTaskType.
		Models: ModelCard{Capabilities: "supported_task_types", Precision: "dit_precision", TaskTypes: map[string]string{
			"T2V": "text_to_video", "TI2V": "text_to_video", "I2I": "image_edit", "TI2I": "image_edit"}},
		OwnEncoder: true, // entrypoints/utils.py save_outputs: imageio-ffmpeg's libx264, CRF 25
		Departs: map[string]Departure{"job-fields": {
			File:   "sglang/multimodal_gen/runtime/entrypoints/openai/video_api.py",
			Source: "seconds = int(round((sampling.num_frames or 0) / float(sampling.fps or 24)))",
			Why:    "the job's seconds is the clip's length rounded to whole seconds (17 frames at 16 fps: \"1\")"}},
	}
	// VLLMOmni is vllm-omni 0.30.0's API server on vllm 0.30.0.
	VLLMOmni = Profile{
		Name: "vllm-omni", Source: "vllm-omni 0.30.0 (PyPI): vllm_omni/entrypoints/openai/{api_server.py,protocol/videos.py,video/generation/helpers.py,serving_video.py}; vllm 0.30.0: vllm/entrypoints/serve/engine/protocol.py",
		CreateVideo: "POST /v1/videos", PollVideo: "GET /v1/videos/{id}", VideoContent: "GET /v1/videos/{id}/content",
		DeleteVideo: "DELETE /v1/videos/{id}", EditImage: "POST /v1/images/edits",
		CreateEncodings: []string{"multipart"}, // api_server.create_video takes Depends(_parse_video_form)
		// protocol/videos.py VideoGenerationStatus.
		Statuses: identity(api.StatusQueued, api.StatusInProgress, api.StatusCompleted, api.StatusFailed),
		// video/generation/helpers.py _run_video_generation_job: perf_counter around
		// generate_video_bytes and the save.
		TaskTime:     []string{"inference_time_s"},
		TaskTimeNote: "inference_time_s spans generation and saving the file, not the Task call alone",
		// vLLM's validation handler names a form field by its location, "body.<field>".
		ParamPrefix: "body.",
		// serving_video._video_metadata_from_artifacts: fps (the output's), num_frames (counted
		// in the encoded MP4) and duration_s, merged into the job by _run_video_generation_job.
		Produced:   []string{"num_frames", "fps", "duration_s"},
		OwnEncoder: true, // serving_video._encode_video_bytes: PyAV's libx264, CRF 18
		Departs: map[string]Departure{"job-fields": {
			File:   "vllm_omni/entrypoints/openai/video/generation/helpers.py",
			Source: "resp.seconds = str(req.seconds or resp.seconds)",
			Why:    "the job's seconds is the one asked, else VideoResponse's default \"4\" (protocol/videos.py), whatever num_frames and fps were asked"}},
		// vllm's ModelCard (serve/engine/protocol.py): id, object, created, owned_by, root,
		// parent, max_model_len, permission: no capability, revision, precision or profile.
		Models: ModelCard{},
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
	for _, f := range p.Produced {
		n, ok := raw[f].(float64)
		if !ok {
			continue
		}
		switch f {
		case "num_frames":
			v.Produced.NumFrames = int(n)
		case "fps":
			v.Produced.FPS = int(n)
			if float64(v.Produced.FPS) != n {
				fs = append(fs, Finding{"fractional-fps", fmt.Sprintf("fps %v is not a whole number", n)})
			}
		case "duration_s":
			v.Produced.DurationS = n
		}
		v.Said = append(v.Said, f)
	}
	return v, fs, nil
}

// Field is a request field's name as the server's error.param names it, without the
// profile's prefix ("body.fps" is fps).
func (p Profile) Field(param string) string { return strings.TrimPrefix(param, p.ParamPrefix) }

// ParseModel reads one entry of the server's GET /v1/models in the contract's terms. unsaid are
// the declaration fields (capabilities, revision, precision, profile) the server's list never
// carries; a field the profile names but this entry lacks reads "".
func (p Profile) ParseModel(raw map[string]any) (m api.Model, unsaid []string) {
	m.ID, _ = raw["id"].(string)
	m.Raw = raw
	c := p.Models
	for _, f := range []struct {
		name, from string
		into       *string
	}{{"revision", c.Revision, &m.Revision}, {"precision", c.Precision, &m.Precision}, {"profile", c.Profile, &m.Profile}} {
		if f.from == "" {
			unsaid = append(unsaid, f.name)
			continue
		}
		*f.into, _ = raw[f.from].(string)
	}
	if c.Capabilities == "" {
		return m, append([]string{"capabilities"}, unsaid...)
	}
	list, _ := raw[c.Capabilities].([]any)
	for _, x := range list {
		s, _ := x.(string)
		if c.TaskTypes != nil {
			if s = c.TaskTypes[s]; s == "" {
				continue
			}
		}
		if !slices.Contains(m.Capabilities, s) {
			m.Capabilities = append(m.Capabilities, s)
		}
	}
	return m, unsaid
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
