// Package spec holds the types every model family and the server share: checkpoints, their
// declared controls, resolved settings, and the native Task interface. It is the leaf of the
// models tree: families import it, and it imports no family.
package spec

import (
	"context"
	"fmt"
	"image"
	"strconv"
	"strings"
	"time"
)

// Capability is a workload a checkpoint declares. Routes dispatch on it, never on model names.
type Capability string

const (
	TextToVideo Capability = "text_to_video"
	ImageEdit   Capability = "image_edit"
)

// Size is an output resolution in pixels.
type Size struct{ W, H int }

func (s Size) String() string { return fmt.Sprintf("%dx%d", s.W, s.H) }

// MarshalText writes "WxH"; the zero Size (no size declared) is "".
func (s Size) MarshalText() ([]byte, error) {
	if s == (Size{}) {
		return nil, nil
	}
	return []byte(s.String()), nil
}

func (s *Size) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*s = Size{}
		return nil
	}
	v, err := ParseSize(string(b))
	*s = v
	return err
}

// ParseSize reads "WxH" with positive decimal dimensions and nothing else.
func ParseSize(v string) (Size, error) {
	w, h, ok := strings.Cut(v, "x")
	if !ok {
		return Size{}, fmt.Errorf("size %q is not of the form WxH", v)
	}
	wi, err1 := parseDim(w)
	hi, err2 := parseDim(h)
	if err1 != nil || err2 != nil {
		return Size{}, fmt.Errorf("size %q is not of the form WxH with positive integers", v)
	}
	return Size{wi, hi}, nil
}

func parseDim(s string) (int, error) {
	// Canonical decimal only: "0320" or "+320" is not a size anyone means to send.
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" || s[0] == '0' {
		return 0, fmt.Errorf("bad dimension %q", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad dimension %q", s)
	}
	return n, nil
}

// IntRange is an inclusive range.
type IntRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

func (r IntRange) Contains(v int) bool { return v >= r.Min && v <= r.Max }
func (r IntRange) String() string      { return fmt.Sprintf("%d..%d", r.Min, r.Max) }

// FloatRange is an inclusive range.
type FloatRange struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

func (r FloatRange) Contains(v float64) bool { return v >= r.Min && v <= r.Max }
func (r FloatRange) String() string          { return fmt.Sprintf("%g..%g", r.Min, r.Max) }

// FrameRule says which frame counts a video model can produce: Step*k + Offset within Range
// (Wan's VAE, for instance, needs 4k+1).
type FrameRule struct {
	Step   int      `json:"step"`
	Offset int      `json:"offset"`
	Range  IntRange `json:"range"`
}

func (r FrameRule) Allows(n int) bool {
	return r.Range.Contains(n) && r.Step > 0 && (n-r.Offset)%r.Step == 0
}

func (r FrameRule) String() string {
	form := fmt.Sprintf("%dk+%d", r.Step, r.Offset)
	if r.Step == 1 && r.Offset == 0 {
		form = "any count"
	}
	return fmt.Sprintf("%s in %s", form, r.Range)
}

// Controls declare every setting a checkpoint honours. Anything not declared is rejected by
// the server; nothing is clamped or substituted.
type Controls struct {
	Sizes    []Size     `json:"sizes"`
	AutoSize bool       `json:"auto_size,omitempty"` // image_edit: "auto" means the reference's size
	Frames   *FrameRule `json:"frames,omitempty"`    // text_to_video only
	FPS      []int      `json:"fps,omitempty"`       // text_to_video only
	Steps    IntRange   `json:"num_inference_steps"`
	Guidance FloatRange `json:"guidance"`
	// GuidanceParam is the request field that carries guidance for this family
	// ("guidance_scale" or "true_cfg_scale"); the other spelling is rejected.
	GuidanceParam  string `json:"guidance_param"`
	NegativePrompt bool   `json:"negative_prompt"`
}

func (c Controls) AllowsSize(s Size) bool {
	for _, a := range c.Sizes {
		if a == s {
			return true
		}
	}
	return false
}

func (c Controls) AllowsFPS(f int) bool {
	for _, a := range c.FPS {
		if a == f {
			return true
		}
	}
	return false
}

// Settings is one fully resolved generation request: every field has its final value.
type Settings struct {
	Prompt         string  `json:"prompt"`
	NegativePrompt string  `json:"negative_prompt,omitempty"`
	Size           Size    `json:"size"`
	NumFrames      int     `json:"num_frames,omitempty"`
	FPS            int     `json:"fps,omitempty"`
	Steps          int     `json:"num_inference_steps"`
	Guidance       float64 `json:"guidance"`
	Seed           int64   `json:"seed"`
}

// Checkpoint is one servable model: identity, declared capabilities and controls, and how its
// native Task is built.
type Checkpoint struct {
	ID           string       `json:"id"`
	Family       string       `json:"family"`
	Profile      string       `json:"profile"` // e.g. "reference/L0", "L0-random", "full"
	Revision     string       `json:"revision"`
	Precision    string       `json:"precision"`
	Capabilities []Capability `json:"capabilities"`
	Controls     Controls     `json:"controls"`
	Defaults     Settings     `json:"defaults"`
	// NewTask builds the in-process Task; nil for families served by a worker process.
	NewTask func() (Task, error) `json:"-"`
	// Worker is the argv of the long-lived worker process that runs this family's Task.
	Worker []string `json:"-"`
	// Engine is how the Task runs the model (see Actual.Engine), for families that offer a
	// choice: mediaserve passes it to the worker as --engine (docs/WORKER.md), and every
	// actual must report it back.
	Engine string `json:"engine,omitempty"`
	// Layouts are the GPU layouts the row's Task supports, in order of preference (measured
	// best first): mediaserve serves the first that fits the visible GPUs unless told one.
	// Empty: no choice (reference and in-process families), so no --layout is passed and
	// every actual's layout must be empty.
	Layouts []Layout `json:"layouts,omitempty"`
	// Layout is the layout this served Task runs, chosen by mediaserve from Layouts (see
	// ChooseLayout) and passed to the worker as --layout; the row itself leaves it empty.
	Layout Layout `json:"layout,omitempty"`
}

func (c Checkpoint) Has(cap Capability) bool {
	for _, x := range c.Capabilities {
		if x == cap {
			return true
		}
	}
	return false
}

// Request is what a Task receives: resolved settings plus, for image_edit, the reference.
type Request struct {
	Settings
	// Reference is the reference decoded, for an in-process Task; nil for a Task that decodes
	// ReferenceFile itself (an out-of-process worker: server/reference.go).
	Reference image.Image
	// ReferenceFile is the reference as it was uploaded (PNG, JPEG or WebP), Reference's
	// source: an out-of-process Task gets these bytes, never a re-encode.
	ReferenceFile []byte
	// Progress, when set, is called as denoising steps complete.
	Progress func(done, total int)
	// Frames, when set, is where a Task may hand over its output while it still runs (the
	// server's clip encoder, so a clip encodes while the rest of it is still decoded). The
	// Task calls it before Run returns, in order, with consecutive runs of its output's packed
	// rgb24 bytes: their concatenation is a prefix of the returned Output's Video.Pix, and
	// each slice points into that very buffer, which the Task no longer changes. The receiver
	// keeps the slices without copying; it returns at once. A Task may never call it.
	Frames func(pix []byte)
}

// Actual is what a Task really produced. The server reports it and checks it equals what was
// asked.
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
	// Engine is how the Task ran its model ("eager", "regional-compile"); empty for families
	// with no choice. Bytes differ between engines, so the native path and the server run the
	// same one and the server fails a job whose engine is not the row's.
	Engine string `json:"engine,omitempty"`
	// Layout is the GPU layout the Task ran ("cfg-2", ...); empty for rows without Layouts.
	// Bytes may differ between layouts, so the server fails a job whose layout is not the
	// served one, as for Engine.
	Layout string `json:"layout,omitempty"`
	// Parity is how the runtime that made this output (its engine and layout) compared, at
	// load, with the reference runtime on one denoising step; nil for families without it.
	Parity *Parity `json:"parity,omitempty"`
}

// Parity is a worker's check at load (models/pyworker/parity.py, docs/GPU.md "Parity"): the
// first denoising step of the warm-up's call at the pinned shape, on the served runtime
// against eager on one device before any layout or engine, with the fp32 transformer's step
// (block by block, on every card) as the noise floor. Four quantities: the transformer's
// conditional (unguided) prediction, its unconditional one (the step's second call, where it
// runs two: the guidance branches), the guided one and the latents after the step. A worker
// outside the bound never becomes ready. The bounds' factors and ceilings are ParityBounds.
type Parity struct {
	Reference string `json:"reference"`       // what the served step was compared with
	Served    string `json:"served"`          // the served runtime, or "is the reference" (eager on one device)
	Fault     string `json:"fault,omitempty"` // a wrong runtime injected on purpose (models/pyworker/faults.py)
	// The served runtime's distances to the reference: the guided and the conditional
	// prediction's relative L2, the latents' largest absolute difference; nil where the served
	// runtime is the reference.
	RelL2     *float64 `json:"rel_l2"`
	CondRelL2 *float64 `json:"cond_rel_l2"`
	MaxAbs    *float64 `json:"max_abs"`
	// Each quantity's distance to fp32, eager bf16's (the floor) and the served runtime's; its
	// bound (a factor times the floor) and, for the predictions, the ceiling over the floor.
	FP32Reference     float64 `json:"fp32_reference"`
	FP32Served        float64 `json:"fp32_served"`
	Bound             float64 `json:"bound"`
	Ceiling           float64 `json:"ceiling"`
	CondFP32Reference float64 `json:"cond_fp32_reference"`
	CondFP32Served    float64 `json:"cond_fp32_served"`
	CondBound         float64 `json:"cond_bound"`
	CondCeiling       float64 `json:"cond_ceiling"`
	// The unconditional prediction's, as the conditional one's; absent (nil) where the step
	// makes one transformer call (no guidance branches: a guidance-distilled model).
	UncondRelL2         *float64 `json:"uncond_rel_l2,omitempty"`
	UncondFP32Reference *float64 `json:"uncond_fp32_reference,omitempty"`
	UncondFP32Served    *float64 `json:"uncond_fp32_served,omitempty"`
	UncondBound         *float64 `json:"uncond_bound,omitempty"`
	UncondCeiling       *float64 `json:"uncond_ceiling,omitempty"`
	MaxAbsFP32Reference float64  `json:"max_abs_fp32_reference"`
	MaxAbsFP32Served    float64  `json:"max_abs_fp32_served"`
	MaxAbsBound         float64  `json:"max_abs_bound"`
	BoundOf             string   `json:"bound_of"` // the inequalities, in words
	Passed              bool     `json:"passed"`
	Failed              []string `json:"failed,omitempty"` // what failed, in words
	// NotChecked, when set, is why the worker ran no parity check (there are no figures).
	NotChecked string `json:"not_checked,omitempty"`
}

// String is the figures in one line, as reports print them.
func (p *Parity) String() string {
	if p == nil {
		return "not measured"
	}
	if p.NotChecked != "" {
		return "not checked: " + p.NotChecked
	}
	verdict := "passed"
	if !p.Passed {
		verdict = "FAILED"
	}
	g := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.3g", *v)
	}
	// The unconditional prediction's figures where the step has them.
	uncondNear, uncondFar := "", ""
	if p.UncondRelL2 != nil {
		uncondNear = ", uncond " + g(p.UncondRelL2)
	}
	if p.UncondFP32Reference != nil || p.UncondFP32Served != nil || p.UncondBound != nil {
		uncondFar = fmt.Sprintf(", uncond %s (%s) / %s", g(p.UncondFP32Served), g(p.UncondFP32Reference), g(p.UncondBound))
	}
	served := "served is the reference (" + p.Reference + ")"
	if p.Served != IsReference {
		served = fmt.Sprintf("%s against eager: cond %s%s, guided %s, latents max abs %s", p.Served, g(p.CondRelL2), uncondNear, g(p.RelL2), g(p.MaxAbs))
	}
	if p.Fault != "" {
		served = "fault " + p.Fault + ", " + served
	}
	return fmt.Sprintf("%s; to fp32, served (eager bf16) / bound: cond %.3g (%.3g) / %.3g%s, guided %.3g (%.3g) / %.3g, latents max abs %.3g (%.3g) / %.3g: %s",
		served, p.CondFP32Served, p.CondFP32Reference, p.CondBound, uncondFar, p.FP32Served, p.FP32Reference, p.Bound,
		p.MaxAbsFP32Served, p.MaxAbsFP32Reference, p.MaxAbsBound, verdict)
}

// IsReference is Parity.Served where the served runtime is the reference itself.
const IsReference = "is the reference"

// ParityReporter is implemented by Tasks whose workers check parity at load: the figures of
// the (first) loaded worker, nil before it is ready.
type ParityReporter interface {
	Parity() *Parity
}

// Output is a Task's result: frames (exactly one for image_edit) and what was produced.
// In-process Tasks set Frames; worker Tasks hand over packed rgb24 in Video, as the worker
// wrote it, so the server never converts it.
type Output struct {
	Frames       []*image.RGBA
	Video        *Video
	Actual       Actual
	TaskWall     time.Duration // wall time of the native generation call only
	PeakMemoryMB float64
	// Phases splits TaskWall where the Task can time its parts (e.g. encode_prompt, denoise,
	// decode), in milliseconds.
	Phases map[string]float64
}

// Pixels returns the output as packed rgb24, packing Frames when Video is not set.
func (o Output) Pixels() (Video, error) {
	if o.Video != nil {
		return *o.Video, nil
	}
	return PackRGBA(o.Frames)
}

// Task is a family's native generation call. Implementations must be deterministic for equal
// requests and must honour ctx cancellation between steps.
type Task interface {
	Run(ctx context.Context, req Request) (Output, error)
}

// Loader is implemented by Tasks that load weights or start processes before serving; the
// server calls Load before reporting ready, so loading is never inside a timed request.
type Loader interface {
	Load(ctx context.Context) error
}

// Closer releases what Load acquired.
type Closer interface {
	Close() error
}

// Error is a Task failure with a stable machine-readable code (e.g. "worker_crashed").
type Error struct {
	Code    string
	Message string
	// BadInput marks failures caused by the request itself (e.g. an instruction outside a
	// family's vocabulary), which the server answers with 400 rather than 500.
	BadInput bool
	Param    string // the request field at fault, when BadInput
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Fields renders settings as the HTTP request fields a client sends for them, under the
// controls' parameter names: the inverse of the server's resolution.
func (s Settings) Fields(c Controls, capability Capability) map[string]string {
	f := map[string]string{
		"prompt":              s.Prompt,
		"size":                s.Size.String(),
		"num_inference_steps": strconv.Itoa(s.Steps),
		c.GuidanceParam:       strconv.FormatFloat(s.Guidance, 'f', -1, 64),
		"seed":                strconv.FormatInt(s.Seed, 10),
	}
	if capability == TextToVideo {
		f["num_frames"] = strconv.Itoa(s.NumFrames)
		f["fps"] = strconv.Itoa(s.FPS)
	}
	if c.NegativePrompt && s.NegativePrompt != "" {
		f["negative_prompt"] = s.NegativePrompt
	}
	return f
}
