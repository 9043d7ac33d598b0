// Package api holds the wire shapes of the media API as docs/API.md documents them: the video
// object, the image-edit answer, the models list, the error envelope and the parts they share.
// The harness reads every server (mediaserve or another) through these types, never through
// the server's own Go types, so a field renamed on both sides of mediaserve cannot pass
// unnoticed: the contract test decodes a real mediaserve's answers and ledger with Strict.
package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Job statuses of the video object.
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
)

// ErrorBody is the body of the error envelope.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code"`
}

// ErrorEnvelope is every non-2xx answer: {"error": {...}}.
type ErrorEnvelope struct {
	Error ErrorBody `json:"error"`
}

// JobError is a failed job's error, in the video object and the ledger.
type JobError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Settings is what a job was asked for after defaults (the video object's settings, a
// model's defaults, a ledger line's settings). Size is "WxH".
type Settings struct {
	Prompt         string  `json:"prompt"`
	NegativePrompt string  `json:"negative_prompt,omitempty"`
	Size           string  `json:"size"`
	NumFrames      int     `json:"num_frames,omitempty"`
	FPS            int     `json:"fps,omitempty"`
	Steps          int     `json:"num_inference_steps"`
	Guidance       float64 `json:"guidance"`
	Seed           int64   `json:"seed"`
}

// Actual is what the server reports the Task produced.
type Actual struct {
	NumFrames int     `json:"num_frames,omitempty"`
	Width     int     `json:"width"`
	Height    int     `json:"height"`
	FPS       int     `json:"fps,omitempty"`
	DurationS float64 `json:"duration_s,omitempty"`
	Steps     int     `json:"num_inference_steps"`
	Guidance  float64 `json:"guidance"`
	Seed      int64   `json:"seed"`
	Precision string  `json:"precision"`
	Engine    string  `json:"engine,omitempty"`
	Layout    string  `json:"layout,omitempty"` // the GPU layout the Task ran, for a model that offers layouts
	Parity    *Parity `json:"parity,omitempty"` // the runtime's parity check at load, where the server makes one
}

// Parity is a worker's check at load of its runtime (engine and layout) against eager on one
// device, on one denoising step (docs/API.md, docs/GPU.md "Parity").
type Parity struct {
	Reference           string   `json:"reference"`
	Served              string   `json:"served"`
	Fault               string   `json:"fault,omitempty"`
	RelL2               *float64 `json:"rel_l2"`
	CondRelL2           *float64 `json:"cond_rel_l2"`
	MaxAbs              *float64 `json:"max_abs"`
	FP32Reference       float64  `json:"fp32_reference"`
	FP32Served          float64  `json:"fp32_served"`
	Bound               float64  `json:"bound"`
	Ceiling             float64  `json:"ceiling"`
	CondFP32Reference   float64  `json:"cond_fp32_reference"`
	CondFP32Served      float64  `json:"cond_fp32_served"`
	CondBound           float64  `json:"cond_bound"`
	CondCeiling         float64  `json:"cond_ceiling"`
	UncondRelL2         *float64 `json:"uncond_rel_l2,omitempty"`
	UncondFP32Reference *float64 `json:"uncond_fp32_reference,omitempty"`
	UncondFP32Served    *float64 `json:"uncond_fp32_served,omitempty"`
	UncondBound         *float64 `json:"uncond_bound,omitempty"`
	UncondCeiling       *float64 `json:"uncond_ceiling,omitempty"`
	MaxAbsFP32Reference float64  `json:"max_abs_fp32_reference"`
	MaxAbsFP32Served    float64  `json:"max_abs_fp32_served"`
	MaxAbsBound         float64  `json:"max_abs_bound"`
	BoundOf             string   `json:"bound_of"`
	Passed              bool     `json:"passed"`
	Failed              []string `json:"failed,omitempty"`
	NotChecked          string   `json:"not_checked,omitempty"` // why the worker ran no parity check
}

// Timing is the server's account of a job's time: parts that add up to total_ms (docs/API.md).
type Timing struct {
	ReceiveMS      float64            `json:"receive_ms,omitempty"`      // mediaserve reports it; a server may not
	ReceiveBodyMS  float64            `json:"receive_body_ms,omitempty"` // of receive_ms, the upload (the contract is strict: every field declared)
	QueueMS        float64            `json:"queue_ms"`
	TaskCallWallMS float64            `json:"task_call_wall_ms"`
	TaskPhasesMS   map[string]float64 `json:"task_phases_ms,omitempty"`
	HandoverMS     float64            `json:"handover_ms"`
	EncodeWaitMS   float64            `json:"encode_wait_ms"`
	EncodeMS       float64            `json:"encode_ms"`
	OtherMS        float64            `json:"other_ms"`
	TotalMS        float64            `json:"total_ms"`
	StreamedFrames int                `json:"streamed_frames"` // not a part: frames that reached the encoder before the Task returned
}

// Video is the video object of POST and GET /v1/videos. Timing appears once the job has
// started; url, actual, inference_time_s, peak_memory_mb and sha256 once it has completed
// (those are the fields tagged omitempty or omitzero: Strict does not require them).
type Video struct {
	ID             string    `json:"id"`
	Object         string    `json:"object"`
	Model          string    `json:"model"`
	Status         string    `json:"status"`
	Progress       int       `json:"progress"`
	CreatedAt      int64     `json:"created_at"`
	CompletedAt    *int64    `json:"completed_at"`
	ExpiresAt      *int64    `json:"expires_at"`
	Error          *JobError `json:"error"`
	Prompt         string    `json:"prompt"`
	Size           string    `json:"size"`
	Seconds        string    `json:"seconds"`
	Settings       Settings  `json:"settings"`
	RequestID      string    `json:"request_id,omitempty"` // the X-Request-ID of the create that made the job
	URL            string    `json:"url,omitempty"`
	Actual         Actual    `json:"actual,omitzero"`
	Timing         Timing    `json:"timing,omitzero"`
	InferenceTimeS float64   `json:"inference_time_s,omitempty"`
	PeakMemoryMB   float64   `json:"peak_memory_mb,omitempty"`
	SHA256         string    `json:"sha256,omitempty"`
	// Raw is the whole object as received (numbers as json.Number), for what a type cannot say.
	Raw map[string]any `json:"-"`
}

// Terminal reports whether the job has ended (completed or failed).
func (v Video) Terminal() bool { return v.Status == StatusCompleted || v.Status == StatusFailed }

// VideoList is GET /v1/videos.
type VideoList struct {
	Object  string  `json:"object"`
	Data    []Video `json:"data"`
	HasMore bool    `json:"has_more"`
	FirstID string  `json:"first_id,omitempty"` // absent on an empty page
	LastID  string  `json:"last_id,omitempty"`
}

// Deleted is the answer of DELETE /v1/videos/{id} and /v1/images/{id}.
type Deleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// EditData is one item of an edit's data: b64_json, or url for response_format=url.
type EditData struct {
	B64JSON *string `json:"b64_json,omitempty"`
	URL     *string `json:"url,omitempty"`
}

// Edit is the answer of POST /v1/images/edits.
type Edit struct {
	ID             string     `json:"id"`
	Created        int64      `json:"created"`
	Model          string     `json:"model"`
	Data           []EditData `json:"data"`
	Size           string     `json:"size"`
	OutputFormat   string     `json:"output_format"`
	Actual         Actual     `json:"actual"`
	Timing         Timing     `json:"timing"`
	InferenceTimeS float64    `json:"inference_time_s"`
	PeakMemoryMB   float64    `json:"peak_memory_mb"`
	SHA256         string     `json:"sha256"`
	ExpiresAt      *int64     `json:"expires_at"`
}

// IntRange and FloatRange are inclusive bounds of a control.
type (
	IntRange struct {
		Min int `json:"min"`
		Max int `json:"max"`
	}
	FloatRange struct {
		Min float64 `json:"min"`
		Max float64 `json:"max"`
	}
)

// FrameRule says which frame counts a video model takes: Step*k + Offset within Range.
type FrameRule struct {
	Step   int      `json:"step"`
	Offset int      `json:"offset"`
	Range  IntRange `json:"range"`
}

// Controls are the settings a model accepts, as /v1/models declares them.
type Controls struct {
	Sizes          []string   `json:"sizes"`
	AutoSize       bool       `json:"auto_size,omitempty"`
	Frames         *FrameRule `json:"frames,omitempty"`
	FPS            []int      `json:"fps,omitempty"`
	Steps          IntRange   `json:"num_inference_steps"`
	Guidance       FloatRange `json:"guidance"`
	GuidanceParam  string     `json:"guidance_param"`
	NegativePrompt bool       `json:"negative_prompt"`
}

// Defaults is a model's pinned settings as /v1/models lists them: under the request fields'
// names, the guidance under the model's guidance_param (guidance_scale or true_cfg_scale).
type Defaults struct {
	Settings
}

// UnmarshalJSON reads the guidance from whichever of the two request fields holds it.
func (d *Defaults) UnmarshalJSON(b []byte) error {
	var v struct {
		Settings
		GuidanceScale *float64 `json:"guidance_scale"`
		TrueCFGScale  *float64 `json:"true_cfg_scale"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	d.Settings = v.Settings
	switch {
	case v.GuidanceScale != nil:
		d.Guidance = *v.GuidanceScale
	case v.TrueCFGScale != nil:
		d.Guidance = *v.TrueCFGScale
	}
	return nil
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID            string   `json:"id"`
	Object        string   `json:"object"`
	OwnedBy       string   `json:"owned_by"`
	Created       int64    `json:"created"`
	Capabilities  []string `json:"capabilities"`
	Family        string   `json:"family"`
	Profile       string   `json:"profile"`
	Revision      string   `json:"revision"`
	Precision     string   `json:"precision"`
	Runtime       string   `json:"runtime"`
	QueueCapacity int      `json:"queue_capacity"`
	Lanes         int      `json:"lanes"`                  // Tasks serving the model in parallel
	LaneDevices   []string `json:"lane_devices,omitempty"` // each lane's devices, when the server names them
	Layout        string   `json:"layout,omitempty"`       // the GPU layout each lane runs, when the model offers layouts
	Layouts       []string `json:"layouts,omitempty"`      // the layouts the model offers, preferred first
	Parity        *Parity  `json:"parity,omitempty"`       // the first lane's parity check at load, where the server makes one
	Controls      Controls `json:"controls"`
	Defaults      Defaults `json:"defaults"`
	// Fault names the injected fault when the server runs with -fault (self-test only).
	Fault string `json:"fault,omitempty"`
	// Raw is the whole object as received (numbers as json.Number).
	Raw map[string]any `json:"-"`
}

// Has reports whether the model declares capability c.
func (m Model) Has(c string) bool {
	for _, x := range m.Capabilities {
		if x == c {
			return true
		}
	}
	return false
}

// ModelList is GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// Strict decodes exactly one JSON value from b into v and fails on a field v does not name,
// on a field v requires that b lacks (every field whose tag has neither omitempty nor
// omitzero, at any depth) and on trailing data: a field renamed or dropped on the server's
// side fails here. It is how the contract is held; the client's own decoding stays lenient,
// for servers that add fields of their own.
func Strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("strict decode into %T: %w", v, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("strict decode into %T: data after the value", v)
	}
	var raw any
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("strict decode into %T: %w", v, err)
	}
	if missing := required(reflect.TypeOf(v), raw, ""); len(missing) > 0 {
		return fmt.Errorf("strict decode into %T: missing required field %s", v, strings.Join(missing, ", "))
	}
	return nil
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// required lists the paths of the fields t requires that raw lacks.
func required(t reflect.Type, raw any, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if raw == nil || reflect.PointerTo(t).Implements(unmarshaler) {
		return nil // null, or a type that reads itself (time.Time)
	}
	var missing []string
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		items, _ := raw.([]any)
		for i, it := range items {
			missing = append(missing, required(t.Elem(), it, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case reflect.Struct:
		obj, _ := raw.(map[string]any)
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || name == "" {
				continue
			}
			p := strings.TrimPrefix(path+"."+name, ".")
			val, ok := obj[name]
			if !ok {
				if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
					missing = append(missing, p)
				}
				continue
			}
			missing = append(missing, required(f.Type, val, p)...)
		}
	}
	return missing
}
