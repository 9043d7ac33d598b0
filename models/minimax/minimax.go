// Package minimax is MiniMax-H3, a guidance-distilled text-to-audio-video model whose weights
// (about 351 GB) need CPU offload. Only its video track is qualified here.
package minimax

import "mediaqual/models/spec"

// Entries are the family's inventory rows.
func Entries() []spec.Entry {
	return []spec.Entry{{
		Checkpoint: spec.Checkpoint{
			ID: "MiniMaxAI/MiniMax-H3", Family: "minimax", Profile: "full",
			Revision: "48d93ede", Precision: "bf16", // short form from the upstream manifest
			Capabilities: []spec.Capability{spec.TextToVideo},
			Controls: spec.Controls{
				// The upstream manifest pins 124 frames; the VAE is 4x temporal, so counts are
				// taken as 4k. Unverified against the pipeline until the adapter runs.
				Sizes: []spec.Size{{W: 1344, H: 768}}, Frames: &spec.FrameRule{Step: 4, Offset: 0, Range: spec.IntRange{Min: 4, Max: 124}},
				FPS: []int{24}, Steps: spec.IntRange{Min: 1, Max: 100},
				// Guidance-distilled: guidance is fixed at 1.0.
				Guidance: spec.FloatRange{Min: 1, Max: 1}, GuidanceParam: "guidance_scale",
			},
			Defaults: spec.Settings{Size: spec.Size{W: 1344, H: 768}, NumFrames: 124, FPS: 24, Steps: 50, Guidance: 1.0, Seed: 0},
		},
		Workload: spec.TextToVideo, NativeTask: "diffusers.MiniMaxH3ModularPipeline (CPU offload)",
		Status: spec.Planned,
		Note:   "native Task adapter not yet written; diffusers 0.42.1 ships its modular pipeline (modular_pipelines/minimax_h3); frame rule unverified",
		Bundle: "MiniMaxAI/MiniMax-H3", GPU: &spec.GPUNeeds{Count: 1, MemoryGB: 140},
		Video: &spec.VideoContract{MinMotion: 0.5, MinStdDev: 2}, Fixtures: "t2v-prompts",
	}}
}
