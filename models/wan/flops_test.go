package wan

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The counts at the pinned settings, as docs/PERFORMANCE.md derives them by hand.
func TestDenoiseFLOPsAtPinnedSettings(t *testing.T) {
	assert.InDelta(t, 63.2e12, wan21Transformer.denoiseFLOPs(wan21), 0.1e12) // 7,800 tokens
	assert.InDelta(t, 2*30*
		(8*27280*3072*3072.0+4*27280*27280*3072.0+4*27280*3072*3072.0+4*512*3072*3072.0+4*27280*512*3072.0+4*27280*3072*14336.0),
		wan22Transformer.denoiseFLOPs(wan22), 1e9) // 27,280 tokens
	one := wan21
	one.Guidance = 1
	assert.InDelta(t, wan21Transformer.denoiseFLOPs(wan21)/2, wan21Transformer.denoiseFLOPs(one), 1, "no CFG, one pass")
	// The split by kind that docs/PERFORMANCE.md divides a profile's kernel times by.
	gemm, attention := wan21Transformer.denoiseFLOPsByKind(wan21)
	assert.InDelta(t, 39.30e12, gemm, 0.01e12)
	assert.InDelta(t, 23.90e12, attention, 0.01e12)
}
