package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mediaqual/mediaqual/harness/api"
)

// Exchange is a recorded conversation with one server: a video job (create, polls, content,
// delete), a refused request and an image edit, each request with the answer it got.
type Exchange struct {
	Profile string `json:"profile"`
	Source  string `json:"source"` // captured how, or reconstructed from which source files
	Steps   []Step `json:"steps"`
}

// Step is one request and its answer. Step names: create, poll, content, delete, error, edit.
type Step struct {
	Step    string `json:"step"`
	Request struct {
		Method      string            `json:"method"`
		Path        string            `json:"path"`
		ContentType string            `json:"content_type,omitempty"`
		Fields      map[string]string `json:"fields,omitempty"` // form fields, or a JSON body's fields as text
		Files       []string          `json:"files,omitempty"`  // file parts, by field name
	} `json:"request"`
	Response struct {
		Status      int             `json:"status"`
		ContentType string          `json:"content_type,omitempty"`
		Body        json.RawMessage `json:"body,omitempty"` // absent for media
	} `json:"response"`
}

// ReadExchange loads a recorded exchange.
func ReadExchange(path string) (Exchange, error) {
	var x Exchange
	b, err := os.ReadFile(path)
	if err != nil {
		return x, err
	}
	if err := api.Strict(b, &x); err != nil {
		return x, fmt.Errorf("%s: %w", path, err)
	}
	return x, nil
}

// contractFields are the request fields docs/API.md defines for videos and edits.
var contractFields = []string{"model", "prompt", "size", "seconds", "fps", "num_frames", "num_inference_steps",
	"guidance_scale", "true_cfg_scale", "negative_prompt", "seed", "n", "response_format", "output_format"}

// Assess lists the exchange's departures from the contract, in the order they appear. Only an
// exchange that cannot be read (unknown profile, a body that is not JSON where JSON belongs)
// is an error.
func Assess(x Exchange) ([]Finding, error) {
	p, err := ByName(x.Profile)
	if err != nil {
		return nil, err
	}
	var fs []Finding
	add := func(more ...Finding) {
		for _, f := range more {
			if !slices.Contains(fs, f) {
				fs = append(fs, f)
			}
		}
	}
	if _, ok := p.Statuses[api.StatusInProgress]; !ok {
		add(Finding{"no-in-progress", "the server never reports in_progress: a running job reads as queued"})
	}
	var last Video
	var polled []Video
	var asked map[string]string
	for i, s := range x.Steps {
		where := fmt.Sprintf("step %d (%s %s %s)", i, s.Step, s.Request.Method, s.Request.Path)
		ok := s.Response.Status >= 200 && s.Response.Status < 300
		switch s.Step {
		case "create", "poll":
			if !ok && s.Step == "create" {
				_, more := ParseError(s.Response.Status, s.Response.Body)
				add(more...)
				continue
			}
			if !ok {
				add(Finding{"failed-job-non-2xx", fmt.Sprintf("%s: the job is answered with HTTP %d", where, s.Response.Status)})
			}
			v, more, err := p.ParseVideo(s.Response.Body)
			if err != nil {
				return fs, fmt.Errorf("%s: %w", where, err)
			}
			add(more...)
			add(shape("video object", s.Response.Body, &api.Video{})...)
			if s.Step == "create" {
				asked = s.Request.Fields
				add(unknownAccepted(where, asked)...)
				add(echoes(where, asked, v)...)
			} else {
				polled = append(polled, v)
			}
			last = v
		case "content":
			switch {
			case ok && s.Response.ContentType == "video/mp4":
			case ok:
				add(Finding{"content-type", fmt.Sprintf("%s: content is %q, not video/mp4", where, s.Response.ContentType)})
			case last.Status == api.StatusCompleted:
				add(Finding{"no-content", fmt.Sprintf("%s: a completed job's content answers HTTP %d", where, s.Response.Status)})
			case s.Response.Status != 409:
				add(Finding{"content-not-ready-status", fmt.Sprintf("%s: content of a job that is not completed answers HTTP %d, not 409 job_not_complete", where, s.Response.Status)})
			}
		case "delete":
			var d api.Deleted
			if err := api.Strict(s.Response.Body, &d); err != nil || !d.Deleted || d.Object != "video.deleted" {
				// The answer's keys and object, not the step: one departure repeated on every
				// delete is one finding.
				var raw map[string]any
				_ = json.Unmarshal(s.Response.Body, &raw)
				add(Finding{"delete-shape", fmt.Sprintf("a delete answers HTTP %d {%s} (status %v), not {id, object: \"video.deleted\", deleted: true}",
					s.Response.Status, strings.Join(sortedKeys(anyKeys(raw)), ", "), raw["status"])})
			}
		case "error":
			_, more := ParseError(s.Response.Status, s.Response.Body)
			add(more...)
		case "edit":
			if !ok {
				_, more := ParseError(s.Response.Status, s.Response.Body)
				add(more...)
				continue
			}
			var raw map[string]any
			if err := json.Unmarshal(s.Response.Body, &raw); err != nil {
				return fs, fmt.Errorf("%s: %w", where, err)
			}
			add(shape("edit answer", s.Response.Body, &api.Edit{})...)
			if raw["actual"] == nil {
				// Not the step: one departure repeated on every edit is one finding.
				add(Finding{"edit-unconfirmed", "an edit answer does not say what it produced (no actual)"})
			}
			if t, _ := taskTime(raw, p.TaskTime); math.IsNaN(t) {
				add(Finding{"edit-no-timing", "an edit answer reports no Task time"})
			}
			if f := s.Request.Fields["output_format"]; f == "" || f == "png" {
				add(editFormat(raw)...)
			}
		default:
			return fs, fmt.Errorf("%s: unknown step %q", where, s.Step)
		}
	}
	add(progressJumps(polled)...)
	if last.Status == api.StatusCompleted {
		add(completed(p, last)...)
		add(ProducedAsAsked(asked, last)...)
	}
	return fs, nil
}

// editFormat: an edit asked for PNG (the contract's default, or by name) answered with another
// image format (SGLang's image_api.choose_output_image_ext picks jpg when none is named).
func editFormat(raw map[string]any) []Finding {
	data, _ := raw["data"].([]any)
	if len(data) == 0 {
		return nil
	}
	item, _ := data[0].(map[string]any)
	b64, _ := item["b64_json"].(string)
	head, err := base64.StdEncoding.DecodeString(b64[:min(len(b64), 12)])
	if err != nil || len(head) < 4 || bytes.HasPrefix(head, []byte("\x89PNG")) {
		return nil
	}
	kind := "not PNG"
	if bytes.HasPrefix(head, []byte{0xff, 0xd8, 0xff}) {
		kind = "JPEG"
	}
	return []Finding{{"edit-format", fmt.Sprintf("an edit answer's image is %s, not the PNG asked for (output_format png is the contract's default)", kind)}}
}

// shape is the strict contract decode as a finding: the first field the body adds, renames
// or lacks. It names the kind of body, not the step, so one departure repeated on every poll
// is one finding.
func shape(kind string, body []byte, into any) []Finding {
	if err := api.Strict(body, into); err != nil {
		return []Finding{{"shape", fmt.Sprintf("%s: %v", kind, err)}}
	}
	return nil
}

// unknownAccepted: a create with a field the contract does not define was answered 2xx; the
// contract rejects it by name, so the server ignores settings silently.
func unknownAccepted(where string, fields map[string]string) []Finding {
	var fs []Finding
	for _, k := range sortedKeys(fields) {
		if !slices.Contains(contractFields, k) {
			fs = append(fs, Finding{"unknown-field-accepted", fmt.Sprintf("%s: field %q was accepted, not rejected by name", where, k)})
		}
	}
	return fs
}

// echoes compares what the object echoes with what was asked: size, and seconds against
// num_frames/fps.
func echoes(where string, asked map[string]string, v Video) []Finding {
	var fs []Finding
	if s := asked["size"]; s != "" && v.Size != s {
		fs = append(fs, Finding{"setting-changed", fmt.Sprintf("%s: size %q asked, %q echoed", where, s, v.Size)})
	}
	nf, err1 := strconv.Atoi(asked["num_frames"])
	fps, err2 := strconv.Atoi(asked["fps"])
	if err1 == nil && err2 == nil && fps > 0 {
		got, err := strconv.ParseFloat(v.Seconds, 64)
		if want := float64(nf) / float64(fps); err != nil || got != want {
			fs = append(fs, Finding{"seconds-echo", fmt.Sprintf("%s: %d frames at %d fps is %gs; the object says seconds %q", where, nf, fps, want, v.Seconds)})
		}
	}
	return fs
}

// ProducedAsAsked holds what a job object says it produced (the profile's Produced fields) to
// what the create asked (its fields as text): a frame count or fps other than asked is a
// setting the server changed.
func ProducedAsAsked(asked map[string]string, v Video) []Finding {
	var fs []Finding
	for _, f := range v.Said {
		var got int
		switch f {
		case "num_frames":
			got = v.Produced.NumFrames
		case "fps":
			got = v.Produced.FPS
		default:
			continue
		}
		if want, err := strconv.Atoi(asked[f]); err == nil && want != got {
			fs = append(fs, Finding{"setting-changed", fmt.Sprintf("%s %d asked, the job reports %d produced", f, want, got)})
		}
	}
	return fs
}

// progressJumps: polls saw the job unfinished, yet progress never took a value between 0 and
// 100, so a client cannot tell a running job from a stuck one.
func progressJumps(polled []Video) []Finding {
	unfinished, between := 0, false
	for _, v := range polled {
		if v.Status == api.StatusQueued || v.Status == api.StatusInProgress {
			unfinished++
		}
		between = between || (v.Progress > 0 && v.Progress < 100)
	}
	if unfinished > 0 && !between {
		return []Finding{{"progress-jumps", fmt.Sprintf("%d polls of the unfinished job, progress only 0 then 100", unfinished)}}
	}
	return nil
}

// completed checks what a completed job's object must carry.
func completed(p Profile, v Video) []Finding {
	var fs []Finding
	switch {
	case v.Actual != nil:
	case len(v.Said) > 0:
		fs = append(fs, Finding{"settings-partly-confirmed", fmt.Sprintf("the completed job reports only %s of what was produced (no actual): an ignored size, steps, guidance or seed cannot be told from an honoured one", strings.Join(v.Said, ", "))})
	default:
		fs = append(fs, Finding{"settings-unconfirmed", "the completed job does not say what was produced (no actual): ignored settings cannot be told from honoured ones"})
	}
	switch {
	case math.IsNaN(v.TaskTimeS):
		fs = append(fs, Finding{"no-timing", "the completed job reports no Task time"})
	case v.TaskTimeOf != "timing.task_call_wall_ms":
		fs = append(fs, Finding{"timing-not-task", fmt.Sprintf("only %s=%g: %s", v.TaskTimeOf, v.TaskTimeS, p.TaskTimeNote)})
	}
	return fs
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// anyKeys is m's keys as a set (for sortedKeys).
func anyKeys(m map[string]any) map[string]string {
	out := map[string]string{}
	for k := range m {
		out[k] = ""
	}
	return out
}
