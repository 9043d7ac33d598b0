package spec

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Status is a checkpoint's place on the qualification ladder, or why it is off it.
type Status string

const (
	Planned         Status = "planned"          // listed, nothing runs yet
	Implemented     Status = "implemented"      // a native Task exists and serves
	FamilyValidated Status = "family-validated" // the family's criteria pass on real weights
	AIPerfQualified Status = "aiperf-qualified" // a real AIPerf run passed every stage on real weights
	Excluded        Status = "excluded"         // deliberately out of scope; Note says why
	CapabilityGap   Status = "capability gap"   // declares a workload it cannot do; Note says what is missing
)

// Rank orders the ladder; exclusions and gaps are off it (-1).
func (s Status) Rank() int {
	switch s {
	case Planned:
		return 0
	case Implemented:
		return 1
	case FamilyValidated:
		return 2
	case AIPerfQualified:
		return 3
	}
	return -1
}

// VideoContract is a family's validity criteria for a clip beyond its exact shape (frames,
// size, fps and duration must always equal what was asked).
type VideoContract struct {
	// MinMotion is the least mean absolute difference (0..255, RGB) between consecutive frames
	// averaged over the clip: below it the clip is frozen.
	MinMotion float64 `json:"min_motion"`
	// MinStdDev is the least per-frame pixel standard deviation (0..255): below it a frame is
	// blank.
	MinStdDev float64 `json:"min_stddev"`
}

// EditContract is a family's validity criteria for an edited image.
type EditContract struct {
	// MinChange is the least mean absolute difference (0..255) from the reference resized to
	// the output: below it the "edit" returned its input.
	MinChange float64 `json:"min_change"`
}

// GPUNeeds says what hardware a checkpoint's run takes.
type GPUNeeds struct {
	Count    int `json:"count"`
	MemoryGB int `json:"memory_gb"` // per GPU
}

// Variant is a precision, quantisation or parallelism variant of a checkpoint. Variants are
// recorded with their checkpoint and never counted as models of their own.
type Variant struct {
	Name   string `json:"name"`
	Note   string `json:"note"`
	Status Status `json:"status"`
}

// Entry is one inventory row: a checkpoint and everything needed to qualify it.
type Entry struct {
	Checkpoint
	Workload   Capability `json:"workload"`    // the group the checkpoint is qualified in
	NativeTask string     `json:"native_task"` // the family's native generation call
	Status     Status     `json:"status"`
	Note       string     `json:"note,omitempty"` // for exclusions, gaps, and anything partial
	// Bundle is the directory name under MEDIAQUAL_BUNDLES holding the weights (Hugging Face
	// snapshot layout), empty for families that carry none.
	Bundle   string         `json:"bundle,omitempty"`
	GPU      *GPUNeeds      `json:"gpu,omitempty"`
	Video    *VideoContract `json:"video_contract,omitempty"`
	Edit     *EditContract  `json:"edit_contract,omitempty"`
	Fixtures string         `json:"fixtures"` // name of the fixture set in fixtures/
	// DenoiseFLOPs is the family's count of one denoising step's floating-point operations at
	// s (every transformer pass of the step, CFG included), for Task-speed figures; nil where
	// no count is made. The derivation is in docs/PERFORMANCE.md.
	DenoiseFLOPs func(s Settings) float64 `json:"-"`
	// Goldens, for deterministic families, is the file (from the module root) holding the
	// digest of the Task's raw output for each pinned fixture.
	Goldens  string    `json:"goldens,omitempty"`
	Variants []Variant `json:"variants,omitempty"`
	// MaxOverheadMS bounds, per measured request, client end-to-end latency minus Task-call
	// wall: what serving (HTTP, queueing, encode, polling) may add. 0 means no budget.
	MaxOverheadMS float64 `json:"max_overhead_ms,omitempty"`
	// ExpectGap, for a negative control, is the capability gap the suite must detect: the case
	// passes when the probe finds exactly this gap.
	ExpectGap string `json:"expect_gap,omitempty"`
	// ReferenceOutputs, for a family with a bundle, is how its native outputs must match the
	// reference outputs the bundle may carry (ReferenceOutputsDir).
	ReferenceOutputs *ReferenceOutputs `json:"reference_outputs,omitempty"`
	// LoadTimeout, when set, is how long loading the weights may take; otherwise it follows
	// from the bundle's size (models/bundle.LoadTimeout).
	LoadTimeout time.Duration `json:"load_timeout,omitempty"`
	// SeedFree says the output does not depend on the seed (a deterministic reference family):
	// the qualification then does not hold it to changing with the seed.
	SeedFree bool `json:"seed_free,omitempty"`
}

// ReferenceOutputsDir is where, inside a bundle, reference outputs live: outputs made elsewhere
// (the upstream implementation, a trusted earlier run) for the row's pinned fixtures at its
// pinned settings, one file per fixture input named <input key>.mp4 or .png (prompt-0 ... for
// prompts, the edit's name for edits). A bundle without the directory is not compared, and the
// report says so.
const ReferenceOutputsDir = "mediaqual-reference-outputs"

// ReferenceOutputs is a family's criterion against reference outputs.
type ReferenceOutputs struct {
	// MinSSIM is the least mean luma SSIM, frame by frame, between a native output and its
	// reference output (same frame count and size required). Below 1 because bf16 diffusion
	// drifts across GPUs and kernels.
	MinSSIM float64 `json:"min_ssim"`
}

// Problems lists what an inventory row is missing or gets wrong; a complete row has none.
func (e Entry) Problems() []string {
	var p []string
	need := func(ok bool, format string, args ...any) {
		if !ok {
			p = append(p, fmt.Sprintf(format, args...))
		}
	}
	need(e.ID != "", "no checkpoint id")
	need(e.Family != "", "no family")
	need(e.Profile != "", "no profile")
	need(e.NativeTask != "", "no native task")
	need(e.Fixtures != "", "no fixture set")
	need(e.Has(e.Workload), "workload %s is not among its capabilities %v", e.Workload, e.Capabilities)
	need(e.Status.Rank() >= 0 || e.Note != "", "status %q needs a note saying why", e.Status)
	if e.Status == Excluded {
		return p // nothing runs, so nothing else is owed
	}
	if e.Status.Rank() >= 1 {
		need(e.Revision != "" && !strings.Contains(e.Revision, " "), "no immutable revision")
		need(e.Precision != "", "no precision")
		need(e.NewTask != nil || len(e.Worker) > 0, "status %s but no Task", e.Status)
	}
	switch e.Workload {
	case TextToVideo:
		need(e.Video != nil, "no video contract")
		need(e.Controls.Frames != nil && e.Controls.Frames.Allows(e.Defaults.NumFrames), "pinned frame count %d not allowed by its own frame rule", e.Defaults.NumFrames)
		need(e.Controls.AllowsFPS(e.Defaults.FPS), "pinned fps %d not among its controls", e.Defaults.FPS)
	case ImageEdit:
		need(e.Edit != nil, "no edit contract")
	}
	if e.Bundle != "" {
		need(e.ReferenceOutputs != nil && e.ReferenceOutputs.MinSSIM > 0 && e.ReferenceOutputs.MinSSIM <= 1, "a bundle but no reference-output criterion (min SSIM in (0, 1])")
	}
	for i, l := range e.Layouts {
		if err := l.Validate(); err != nil {
			p = append(p, err.Error())
		}
		need(!slices.Contains(e.Layouts[:i], l), "layout %s listed twice", l)
	}
	// Layouts are a worker's choice: an in-process Task runs as it is and reports no layout.
	need(len(e.Layouts) == 0 || len(e.Worker) > 0, "layouts %v but no worker to pass --layout to", e.Layouts)
	need(e.Layout == "", "layout %s set on the row: mediaserve chooses it from Layouts", e.Layout)
	need(e.Controls.AllowsSize(e.Defaults.Size), "pinned size %s not among its controls", e.Defaults.Size)
	need(e.Controls.Steps.Contains(e.Defaults.Steps), "pinned steps %d outside %s", e.Defaults.Steps, e.Controls.Steps)
	need(e.Controls.Guidance.Contains(e.Defaults.Guidance), "pinned guidance %g outside %s", e.Defaults.Guidance, e.Controls.Guidance)
	return p
}

// GapIgnoresReference is the capability gap the reference-influence probe reports for a model
// whose image_edit output does not depend on its reference image.
const GapIgnoresReference = "image_edit: output does not depend on the reference image"
