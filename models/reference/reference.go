package reference

import (
	"fmt"
	"image"
	"math"

	"github.com/mediaqual/mediaqual/models/spec"
)

const (
	family    = "reference"
	profile   = "reference/L0"
	revision  = "ref-v1" // bump whenever any rendering changes bytes
	precision = "fp32"
)

// Defensive bounds: the server validates against Controls first, but a Task called directly
// must fail cleanly rather than allocate without limit or divide by zero.
const (
	maxDim       = 8192
	maxSteps     = 1000
	maxFrames    = 1024
	maxClipPixel = 1 << 26 // frames × W × H
)

// Checkpoints returns the three reference checkpoints. Each call builds fresh values, so
// callers may modify what they get.
func Checkpoints() []spec.Checkpoint {
	return []spec.Checkpoint{t2vCheckpoint(), editCheckpoint(), t2iCheckpoint()}
}

func base(id string, c spec.Capability) spec.Checkpoint {
	return spec.Checkpoint{
		ID:           id,
		Family:       family,
		Profile:      profile,
		Revision:     revision,
		Precision:    precision,
		Capabilities: []spec.Capability{c},
	}
}

func t2vCheckpoint() spec.Checkpoint {
	c := base("ref-t2v", spec.TextToVideo)
	c.Controls = spec.Controls{
		Sizes:          []spec.Size{{W: 320, H: 192}, {W: 256, H: 256}, {W: 480, H: 272}, {W: 160, H: 96}},
		Frames:         &spec.FrameRule{Step: 4, Offset: 1, Range: spec.IntRange{Min: 5, Max: 81}},
		FPS:            []int{8, 16, 24},
		Steps:          spec.IntRange{Min: 1, Max: 50},
		Guidance:       spec.FloatRange{Min: 0, Max: 20},
		GuidanceParam:  "guidance_scale",
		NegativePrompt: false,
	}
	c.Defaults = spec.Settings{
		Size:      spec.Size{W: 320, H: 192},
		NumFrames: 17,
		FPS:       16,
		Steps:     4,
		Guidance:  5.0,
		Seed:      42,
	}
	c.NewTask = func() (spec.Task, error) { return t2vTask{}, nil }
	return c
}

// imageControls are shared by ref-edit and ref-t2i so the negative control is
// indistinguishable from the editor by its declaration alone.
func imageControls() (spec.Controls, spec.Settings) {
	return spec.Controls{
			Sizes:          []spec.Size{{W: 256, H: 256}, {W: 512, H: 512}, {W: 320, H: 192}, {W: 384, H: 256}},
			AutoSize:       true,
			Steps:          spec.IntRange{Min: 1, Max: 50},
			Guidance:       spec.FloatRange{Min: 0, Max: 10},
			GuidanceParam:  "guidance_scale",
			NegativePrompt: false,
		}, spec.Settings{
			Size:     spec.Size{W: 256, H: 256},
			Steps:    4,
			Guidance: 1.0,
			Seed:     42,
		}
}

func editCheckpoint() spec.Checkpoint {
	c := base("ref-edit", spec.ImageEdit)
	c.Controls, c.Defaults = imageControls()
	c.NewTask = func() (spec.Task, error) { return editTask{}, nil }
	return c
}

func t2iCheckpoint() spec.Checkpoint {
	c := base("ref-t2i", spec.ImageEdit)
	c.Controls, c.Defaults = imageControls()
	c.NewTask = func() (spec.Task, error) { return t2iTask{}, nil }
	return c
}

func invalid(format string, a ...any) error {
	return &spec.Error{Code: "invalid_request", Message: fmt.Sprintf(format, a...), BadInput: true}
}

// checkImage validates the settings every reference task uses.
func checkImage(s spec.Settings) error {
	if s.Size.W <= 0 || s.Size.H <= 0 || s.Size.W > maxDim || s.Size.H > maxDim {
		return invalid("size %s outside 1..%d per side", s.Size, maxDim)
	}
	if s.Steps < 1 || s.Steps > maxSteps {
		return invalid("num_inference_steps %d outside 1..%d", s.Steps, maxSteps)
	}
	if math.IsNaN(s.Guidance) || math.IsInf(s.Guidance, 0) {
		return invalid("guidance %v is not finite", s.Guidance)
	}
	return nil
}

func imageActual(s spec.Settings) spec.Actual {
	return spec.Actual{
		Width:     s.Size.W,
		Height:    s.Size.H,
		Steps:     s.Steps,
		Guidance:  s.Guidance,
		Seed:      s.Seed,
		Precision: precision,
	}
}

func newFrame(sz spec.Size) *image.RGBA { return image.NewRGBA(image.Rect(0, 0, sz.W, sz.H)) }

// FNV-1a 64: stable across Go versions and platforms, unlike hash/maphash.
func fnv1a64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is the splitmix64 finaliser; a counter fed through it is a cheap, stateless,
// position-addressable noise source, which keeps every pixel independent of loop order.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

const golden = 0x9e3779b97f4a7c15

func promptKey(prompt string, seed int64) uint64 {
	return mix64(fnv1a64(prompt) ^ mix64(uint64(seed)*golden))
}

// rng is a per-call splitmix64 stream; never shared, so Tasks stay safe for concurrent use.
type rng struct{ s uint64 }

func (r *rng) next() uint64 { r.s += golden; return mix64(r.s) }

func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

func (r *rng) between(lo, hi float64) float64 { return lo + (hi-lo)*r.float() }
