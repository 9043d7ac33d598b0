// Package qwenimage is the Qwen-Image edit family, run by diffusers' QwenImageEditPlusPipeline.
// Classifier-free guidance is "true CFG" and is active only with a negative prompt, which is
// why the pinned negative prompt is a single space.
package qwenimage

import "github.com/mediaqual/mediaqual/models/spec"

// pinned are the row's settings; a compiled engine's warm-up runs at their size.
var pinned = spec.Settings{Size: spec.Size{W: 1024, H: 1024}, NegativePrompt: " ", Steps: 20, Guidance: 4.0, Seed: 42}

// Entries are the family's inventory rows.
func Entries() []spec.Entry {
	return []spec.Entry{{
		Checkpoint: spec.Checkpoint{
			ID: "Qwen/Qwen-Image-Edit-2511", Family: "qwenimage", Profile: "full",
			Revision: "6f3ccc0b56e431dc6a0c2b2039706d7d26f22cb9", Precision: "bf16",
			Capabilities: []spec.Capability{spec.ImageEdit},
			// Steps from 2: with one step the snapshot's scheduler (shift_terminal 0.02) divides 0
			// by 0 and diffusers returns a NaN image.
			Controls: spec.Controls{
				Sizes: []spec.Size{{W: 1024, H: 1024}}, Steps: spec.IntRange{Min: 2, Max: 100},
				Guidance: spec.FloatRange{Min: 1, Max: 20}, GuidanceParam: "true_cfg_scale", NegativePrompt: true,
			},
			Defaults: pinned,
			// The script path is relative to the module root; mediaserve resolves it against
			// $MEDIAQUAL_ROOT. The weights are the row's bundle under $MEDIAQUAL_BUNDLES.
			Worker: []string{"python3", "models/qwenimage/adapter.py", "--bundle-name", "Qwen/Qwen-Image-Edit-2511",
				"--warmup-size", pinned.Size.String()},
			// regional-compile-fused: the block compiled with the family's fused kernels
			// (fused.py: q/k norms and RoPE in one kernel, the GELU in its matmul). On the H200
			// regional-compile denoised at 604.8 ms a step against eager's 772.7
			// (reports/published/qwen-image-edit-2511-L0-random-h200-regional-compile, commit d55b5eb), the fused
			// kernels at 576.8-579.2 against 600.3-601.8 in one call (docs/PERFORMANCE.md). No
			// CUDA graph: the transformer copies a host list to the device inside its forward.
			// `mediaserve -engine eager` serves eager. The warm-up before "ready" runs true CFG,
			// whose two prompts differ in length, so the block is also compiled for a varying
			// text length: no measured job of that run compiled. A reference of another aspect
			// ratio than the warm-up's square does compile again, inside its first job (the
			// worker logs it); the fixtures are square.
			Engine: "regional-compile-fused",
			// The pinned negative prompt keeps true CFG on, so CFG-2 applies; it is not yet
			// measured, so one GPU stays preferred. Ulysses-2 is offered for the 1024² edit
			// (image and reference tokens together), also unmeasured.
			Layouts: []spec.Layout{spec.LayoutSingle, "cfg-2", "ulysses-2"},
		},
		Workload: spec.ImageEdit, NativeTask: "diffusers.QwenImageEditPlusPipeline",
		// The adapter runs (L0-random bundle on an H200); the status stays planned until real
		// weights are qualified.
		Status: spec.Planned, Note: "native adapter runs on an L0-random bundle; not yet qualified on real weights",
		Bundle: "Qwen/Qwen-Image-Edit-2511", GPU: &spec.GPUNeeds{Count: 1, MemoryGB: 80},
		// An output within one level of its source on average returned its input.
		Edit: &spec.EditContract{MinChange: 1}, Fixtures: "edit-photos",
		// As for Wan: bf16 may drift across GPUs, so the match is structural; 0.85 is a
		// judgment, not yet calibrated on real weights.
		ReferenceOutputs: &spec.ReferenceOutputs{MinSSIM: 0.85},
		DenoiseFLOPs:     denoiseFLOPs,
	}}
}
