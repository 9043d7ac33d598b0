package check

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The guard every metric passes through before its threshold (Motion, Edit, ReferenceOutput,
// Influence), fed what a threshold alone lets through: NaN compares false both ways. Before it,
// Influence turned an SSIM error into NaN and both of its comparisons passed.
func TestFiniteFailsNaNAndInf(t *testing.T) {
	assert.NoError(t, finite("motion", "x", 0.3))
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		err := finite("influence-closer-to-own", "SSIM", v)
		assert.ErrorContains(t, err, "check influence-closer-to-own: SSIM is")
	}
}
