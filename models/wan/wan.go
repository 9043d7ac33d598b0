// Package wan is the Wan video family (Wan-AI): Wan2.1-T2V-1.3B and Wan2.2-TI2V-5B, run by the
// diffusers WanPipeline. Settings are pinned from the upstream manifests (DESIGN section 4);
// the VAE compresses time 4x, so frame counts are 4k+1.
package wan

import (
	"strconv"

	"github.com/mediaqual/mediaqual/models/spec"
)

// frames4k1 is Wan's frame rule: the VAE needs 4k+1 frames. diffusers silently rounds other
// counts down; mediaserve rejects them instead.
var frames4k1 = &spec.FrameRule{Step: 4, Offset: 1, Range: spec.IntRange{Min: 5, Max: 121}}

// worker is the argv of the family's native Task worker (models/wan/adapter.py, speaking
// docs/WORKER.md) for a checkpoint whose UniPC flow_shift is pinned at flowShift and whose
// weights are the row's bundle under $MEDIAQUAL_BUNDLES. The script path is relative to the
// module root; mediaserve resolves it against $MEDIAQUAL_ROOT.
// The warm-up before "ready" runs at the row's pinned shape, so a compiled engine is
// specialised for it and no timed job compiles; mediaserve adds the row's --engine.
func worker(flowShift, bundle string, pinned spec.Settings) []string {
	return []string{"python3", "models/wan/adapter.py", "--flow-shift", flowShift, "--bundle-name", bundle,
		"--warmup-size", pinned.Size.String(), "--warmup-frames", strconv.Itoa(pinned.NumFrames)}
}

// engine: regional compilation of the transformer block (diffusers' compile_repeated_blocks)
// measured faster than eager on the H200 at the pinned shapes (docs/PERFORMANCE.md, "Task
// speed"); it is compiled before "ready". `mediaserve -engine eager` serves eager instead.
// Wan2.1 also replays its transformer as a CUDA graph (the same bytes as the compile alone; its
// small blocks are launched from Python fast enough only while the host is idle) and runs the
// family's fused kernels (fused.py: q/k norm and RoPE in one pass, the GELU in its matmul):
// 119.2-120.9 ms a denoising step against 128.7-130.8 without them, in one call, other bytes.
// Wan2.2 has run with neither.
const (
	engine      = "regional-compile"
	engineFused = "regional-compile-fused-graphs"
)

// Layouts, in order of preference. Ulysses context parallelism splits the token sequence
// across GPUs with all-to-alls in every attention layer, so it pays only on long sequences:
// on an H200 pair Ulysses-2 measured 2x slower than one GPU at Wan2.1's 832x480x17 (3,900
// tokens a rank: the all-to-alls dominate) and 1.86x faster at Wan2.2's 1280x704x121
// (27,280 tokens). CFG-2 (the two guidance branches on two GPUs, one exchange a step) is not
// yet measured: it is offered, but Wan2.1 does not prefer it until it is; for Wan2.2 it leads
// on the expectation that one exchange a step costs less than Ulysses' all-to-alls.
var (
	wan21Layouts = []spec.Layout{spec.LayoutSingle, "cfg-2", "ulysses-2"}
	wan22Layouts = []spec.Layout{"cfg-2", "ulysses-2", "ulysses-4", spec.LayoutSingle}
)

// videoContract: real generators move; a clip whose consecutive frames differ by less than
// half a level on average is frozen, one whose frames vary by less than 2 levels is blank.
var videoContract = &spec.VideoContract{MinMotion: 0.5, MinStdDev: 2}

// referenceOutputs: the same seed and settings on other GPUs or kernels may drift in bf16 over
// 30-50 steps, so the match is structural (mean SSIM), not bitwise. 0.85 is a judgment, not
// yet calibrated on real weights.
var referenceOutputs = &spec.ReferenceOutputs{MinSSIM: 0.85}

// The pinned settings (DESIGN section 4). fp16 decodes blank frames upstream, hence bf16;
// 16 fps is Wan2.1's native rate.
var (
	wan21 = spec.Settings{Size: spec.Size{W: 832, H: 480}, NumFrames: 17, FPS: 16, Steps: 30, Guidance: 5.0, Seed: 42}
	wan22 = spec.Settings{Size: spec.Size{W: 1280, H: 704}, NumFrames: 121, FPS: 24, Steps: 50, Guidance: 5.0, Seed: 42}
)

// Entries are the family's inventory rows.
func Entries() []spec.Entry {
	return []spec.Entry{
		{
			Checkpoint: spec.Checkpoint{
				ID: "Wan-AI/Wan2.1-T2V-1.3B", Family: "wan", Profile: "full",
				// No revision is pinned upstream for this checkpoint; it is taken from the
				// bundle's snapshot when the family is implemented.
				Revision: "", Precision: "bf16",
				Capabilities: []spec.Capability{spec.TextToVideo},
				Controls: spec.Controls{
					Sizes: []spec.Size{{W: 832, H: 480}, {W: 480, H: 832}}, Frames: frames4k1, FPS: []int{16},
					Steps: spec.IntRange{Min: 1, Max: 100}, Guidance: spec.FloatRange{Min: 1, Max: 20},
					GuidanceParam: "guidance_scale", NegativePrompt: true,
				},
				Defaults: wan21,
				Worker:   worker("3.0", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", wan21),
				Engine:   engineFused,
				Layouts:  wan21Layouts,
			},
			Workload: spec.TextToVideo, NativeTask: "diffusers.WanPipeline (UniPC flow_shift 3.0)",
			// The adapter runs (L0-random bundle on an H200, reports/published/); the status
			// stays planned until real weights with a pinned revision are qualified.
			Status: spec.Planned, Note: "native adapter runs; revision unpinned until real weights are qualified",
			Bundle: "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", GPU: &spec.GPUNeeds{Count: 1, MemoryGB: 40},
			Video: videoContract, Fixtures: "t2v-prompts", ReferenceOutputs: referenceOutputs,
			DenoiseFLOPs: wan21Transformer.denoiseFLOPs,
			Variants:     []spec.Variant{{Name: "fp16", Note: "decodes blank frames in native diffusers; not served", Status: spec.Excluded}},
		},
		{
			Checkpoint: spec.Checkpoint{
				ID: "Wan-AI/Wan2.2-TI2V-5B", Family: "wan", Profile: "full",
				Revision: "921dbaf3", Precision: "bf16", // short form from the upstream manifest
				Capabilities: []spec.Capability{spec.TextToVideo},
				Controls: spec.Controls{
					Sizes: []spec.Size{{W: 1280, H: 704}, {W: 704, H: 1280}}, Frames: frames4k1, FPS: []int{24},
					Steps: spec.IntRange{Min: 1, Max: 100}, Guidance: spec.FloatRange{Min: 1, Max: 20},
					GuidanceParam: "guidance_scale", NegativePrompt: true,
				},
				Defaults: wan22,
				// Text-to-video mode: no image is passed, so TI2V generates from the prompt alone.
				Worker:  worker("5.0", "Wan-AI/Wan2.2-TI2V-5B-Diffusers", wan22),
				Engine:  engine,
				Layouts: wan22Layouts,
			},
			Workload: spec.TextToVideo, NativeTask: "diffusers.WanPipeline, text-to-video mode (UniPC flow_shift 5.0)",
			Status: spec.Planned, Note: "native adapter shared with Wan2.1; revision is the manifest's short hash",
			Bundle: "Wan-AI/Wan2.2-TI2V-5B-Diffusers", GPU: &spec.GPUNeeds{Count: 1, MemoryGB: 80},
			Video: videoContract, Fixtures: "t2v-prompts", ReferenceOutputs: referenceOutputs,
			DenoiseFLOPs: wan22Transformer.denoiseFLOPs,
		},
	}
}
