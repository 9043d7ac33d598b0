// Package minimax is MiniMax-H3, a guidance-distilled text-to-audio-video model (a 33 B
// transformer and a Qwen3-VL-32B text encoder, about 130 GiB in bf16), run by diffusers'
// MiniMaxH3ModularPipeline (t2va workflow).
// It generates a stereo soundtrack with the video; only the video track is qualified here.
package minimax

import (
	"strconv"

	"github.com/mediaqual/mediaqual/models/spec"
)

// frames17n5 is the pipeline's frame rule: the video VAE encodes 17-frame chunks keeping 5
// latents, so counts are 17n+5 (the pipeline silently rounds others up; mediaserve rejects
// them), and it generates 5 to 15 s at a fixed 24 fps: 124 (17*7+5) to 345 (17*20+5).
var frames17n5 = &spec.FrameRule{Step: 17, Offset: 5, Range: spec.IntRange{Min: 124, Max: 345}}

// worker is the argv of the family's native Task worker (models/minimax/adapter.py, speaking
// docs/WORKER.md) for the row's bundle under $MEDIAQUAL_BUNDLES; it offloads to the CPU by
// default. The script path is relative to the module root; mediaserve resolves it against
// $MEDIAQUAL_ROOT. Parity before ready runs its step at the row's pinned shape.
func worker(bundle string, pinned spec.Settings) []string {
	return []string{"python3", "models/minimax/adapter.py", "--bundle-name", bundle,
		"--warmup-size", pinned.Size.String(), "--warmup-frames", strconv.Itoa(pinned.NumFrames)}
}

// Entries are the family's inventory rows.
func Entries() []spec.Entry {
	pinned := spec.Settings{Size: spec.Size{W: 1344, H: 768}, NumFrames: 124, FPS: 24, Steps: 50, Guidance: 1.0, Seed: 0}
	return []spec.Entry{{
		Checkpoint: spec.Checkpoint{
			ID: "MiniMaxAI/MiniMax-H3", Family: "minimax", Profile: "full",
			Revision: "48d93ede", Precision: "bf16", // short form from the upstream manifest
			Capabilities: []spec.Capability{spec.TextToVideo},
			Controls: spec.Controls{
				// 1344x768 is the pipeline's own 16:9 canvas; sizes must be multiples of 32
				// (VAE 16x, patch 2) within 1:4..4:1.
				Sizes: []spec.Size{{W: 1344, H: 768}}, Frames: frames17n5,
				// Steps count sigma grid points, terminal 0 included: N steps are N-1
				// transformer calls, and the scheduler needs N >= 2.
				FPS: []int{24}, Steps: spec.IntRange{Min: 2, Max: 100},
				// Guidance-distilled: guidance is fixed at 1.0, and there is no negative prompt.
				Guidance: spec.FloatRange{Min: 1, Max: 1}, GuidanceParam: "guidance_scale",
			},
			Defaults: pinned,
			Worker:   worker("MiniMaxAI/MiniMax-H3", pinned),
			// The model card launches with --ulysses-degree 4, hence first. Guidance-distilled:
			// there is no second guidance branch, so no CFG-2.
			Layouts: []spec.Layout{"ulysses-4", "ulysses-2", spec.LayoutSingle},
		},
		Workload:   spec.TextToVideo,
		NativeTask: "diffusers.MiniMaxH3ModularPipeline, t2va workflow (ComponentsManager auto CPU offload)",
		// Its L0 bundle is configs only (build_l0.py): the adapter draws the ~69 B random
		// parameters in memory at load, as the lent machine's 64 GB disk cannot hold them.
		// On one GPU the text encoder waits in host memory between encodings: 68 GiB resident,
		// a 130.2 GiB peak while it encodes a prompt beside the transformer (measured on an H200,
		// reports/published/minimax-h3-L0-random-single-native).
		Status: spec.Planned,
		Note:   "native adapter runs on one H200 with in-memory L0-random weights (one native Task, 327 s, parity before ready at the pinned shape); multi-GPU layouts and real weights not yet run",
		Bundle: "MiniMaxAI/MiniMax-H3", GPU: &spec.GPUNeeds{Count: 1, MemoryGB: 140},
		Video: &spec.VideoContract{MinMotion: 0.5, MinStdDev: 2}, Fixtures: "t2v-prompts",
		// As for Wan: bf16 drift across GPUs; a judgment, not yet calibrated on real weights.
		ReferenceOutputs: &spec.ReferenceOutputs{MinSSIM: 0.85},
	}}
}
