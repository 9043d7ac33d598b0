package check_test

import (
	"image"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
)

// noisy is frames with n random pixels of each set to random values: a nondeterministic
// kernel's one picture (fault nondeterministic sets 16 a frame).
func noisy(frames []*image.RGBA, n int) []*image.RGBA {
	out := make([]*image.RGBA, len(frames))
	for i, f := range frames {
		c := image.NewRGBA(f.Rect)
		copy(c.Pix, f.Pix)
		for range n {
			c.Pix[4*rand.IntN(len(c.Pix)/4)+rand.IntN(3)] = uint8(rand.IntN(256))
		}
		out[i] = c
	}
	return out
}

// Outputs that must differ are compared by picture, not bytes: one picture with
// nondeterministic pixels is still one picture, and fails; other pictures pass; an input whose
// frames are unknown (its decode failed, a failure of its own) is left out. Shown failing by
// comparing frame digests, as before: the noisy copies passed both checks.
func TestOutputsCompareByPicture(t *testing.T) {
	a := []*image.RGBA{pattern(64, 48, 0), pattern(64, 48, 3)}
	b := []*image.RGBA{pattern(64, 48, 20), pattern(64, 48, 23)}
	noisyA := noisy(a, 16)
	t.Logf("distance: one picture with 16 noisy pixels a frame %.3f, another picture %.1f",
		check.OutputDistance(check.Coarse(a), check.Coarse(noisyA)), check.OutputDistance(check.Coarse(a), check.Coarse(b)))

	require.NoError(t, check.DistinctOutputs(map[string][]*image.RGBA{"prompt-0": check.Coarse(a), "prompt-1": check.Coarse(b), "prompt-2": nil}))
	require.NoError(t, check.DistinctOutputs(map[string][]*image.RGBA{"prompt-0": check.Coarse(a)}))
	err := check.DistinctOutputs(map[string][]*image.RGBA{"prompt-0": check.Coarse(a), "prompt-1": check.Coarse(b), "prompt-2": check.Coarse(noisyA)})
	failsWith(t, err, "distinct-outputs")
	assert.ErrorContains(t, err, "inputs prompt-0 and prompt-2 gave one picture")

	require.NoError(t, check.SeedInfluence("the probe at seeds 1 and 2", a, b))
	err = check.SeedInfluence("the probe at seeds 1 and 2", a, noisyA)
	failsWith(t, err, "seed-influence")
	assert.ErrorContains(t, err, "the probe at seeds 1 and 2 gave one picture")
	// Another frame count or size is never one picture.
	require.NoError(t, check.SeedInfluence("the probe", a, a[:1]))
}
