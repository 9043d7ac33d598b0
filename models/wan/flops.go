package wan

import "github.com/mediaqual/mediaqual/models/spec"

// transformer is what the FLOP count needs of a WanTransformer3DModel config.
type transformer struct {
	layers, dim, ffn int
	vaeSpatial       int // VAE spatial compression; patch is 1x2x2 for both rows
	textTokens       int // UMT5 context, padded to 512
}

var (
	wan21Transformer = transformer{layers: 30, dim: 1536, ffn: 8960, vaeSpatial: 8, textTokens: 512}
	wan22Transformer = transformer{layers: 30, dim: 3072, ffn: 14336, vaeSpatial: 16, textTokens: 512}
)

// denoiseFLOPs counts the matrix work of one step at s: per block, self-attention projections
// 8Nd², attention scores and values 4N²d, cross-attention 4Nd² + 4Td² + 4NTd, feed-forward
// 4Ndf, for N video tokens and T text tokens; two passes when guidance > 1 (CFG). Norms,
// modulation, embeddings and the VAE are left out (under 1 %).
func (m transformer) denoiseFLOPs(s spec.Settings) float64 {
	gemm, attention := m.denoiseFLOPsByKind(s)
	return gemm + attention
}

// denoiseFLOPsByKind splits that count as a profile of the step splits its kernels: the
// matmuls (projections and feed-forward: 12Nd² + 4Td² + 4Ndf a block) and the attention kernels
// (scores and values: 4N²d + 4NTd).
func (m transformer) denoiseFLOPsByKind(s spec.Settings) (gemm, attention float64) {
	latentFrames := (s.NumFrames-1)/4 + 1
	n := float64(latentFrames * (s.Size.H / (2 * m.vaeSpatial)) * (s.Size.W / (2 * m.vaeSpatial)))
	t, d, f := float64(m.textTokens), float64(m.dim), float64(m.ffn)
	passes := 1.0
	if s.Guidance > 1 {
		passes = 2
	}
	blocks := passes * float64(m.layers)
	return blocks * (12*n*d*d + 4*t*d*d + 4*n*d*f), blocks * (4*n*n*d + 4*n*t*d)
}
