package qwenimage

import "github.com/mediaqual/mediaqual/models/spec"

// The QwenImageTransformer2DModel of Qwen-Image-Edit-2511: 60 dual-stream blocks, 24 heads of
// 128, feed-forward 4x.
const (
	layers = 60
	dim    = 3072
	ffn    = 4 * dim
	// textTokens estimates the text stream: Qwen2.5-VL's template, the prompt and the
	// reference seen at 384² (about 190 vision tokens). It varies with the prompt; at the
	// pinned size 100 tokens more or fewer move the count by about 1.5 %.
	textTokens = 256
)

// denoiseFLOPs counts the matrix work of one step at s: N image tokens (the output latents and
// the reference's, each 1/16 of the side, packed 2x2; the pipeline sizes the reference to the
// output's area) and T text tokens per block: projections 8Nd² + 8Td², joint attention
// 4(N+T)²d, feed-forward 4Ndf + 4Tdf; two passes with true CFG (guidance > 1). Norms,
// modulation and the VAE are left out.
func denoiseFLOPs(s spec.Settings) float64 {
	n := 2 * float64((s.Size.W/16)*(s.Size.H/16))
	t, d, f := float64(textTokens), float64(dim), float64(ffn)
	block := 8*n*d*d + 8*t*d*d + 4*(n+t)*(n+t)*d + 4*n*d*f + 4*t*d*f
	passes := 1.0
	if s.Guidance > 1 {
		passes = 2
	}
	return passes * layers * block
}
