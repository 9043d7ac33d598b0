package check

import (
	"image"
	"maps"
	"math"
	"slices"

	"github.com/mediaqual/mediaqual/harness/media"
)

// Outputs that must differ (other prompts, references, seeds) are compared in their decoded
// frames' coarse content, never their bytes: a server that ignores what it is asked but whose
// kernels are not deterministic gives other bytes, and other pixels here and there, for one
// and the same picture.

// OutputBox is the side of the boxes whose means outputs are compared in.
const OutputBox = 8

// MinOutputDistance is the mean absolute difference (of 255, over R, G and B, in OutputBox box
// means) under which two outputs are one picture: nondeterministic pixels move box means by
// a fraction of a level, while another picture moves them by tens (TestOutputsCompareByPicture).
const MinOutputDistance = 2.0

// Coarse is an output's decoded frames as they are compared: OutputBox box means, a 64th of
// the frames' memory, so a run can keep one per input.
func Coarse(frames []*image.RGBA) []*image.RGBA {
	out := make([]*image.RGBA, len(frames))
	for i, f := range frames {
		out[i] = media.BoxMeans(f, OutputBox)
	}
	return out
}

// OutputDistance is the mean absolute difference of two coarse outputs (Coarse), frame by
// frame; +Inf when they differ in frame count or size, which no one picture does.
func OutputDistance(a, b []*image.RGBA) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return math.Inf(1)
	}
	sum := 0.0
	for i := range a {
		d, err := media.MeanAbsDiff(a[i], b[i])
		if err != nil {
			return math.Inf(1)
		}
		sum += d
	}
	return sum / float64(len(a))
}

// DistinctOutputs is the check "distinct-outputs": the artifacts of different inputs (other
// prompts; other references and instructions) differ in their decoded frames. A server that
// ignores what it is asked serves one picture for all of them, and where no native path holds
// it to the family's own output (an endpoint), or the native path shares the fault, nothing
// else sees it. outputs maps each input's key to its artifact's coarse frames (Coarse); an
// input without frames (its decode failed, which fails its own check) is left out.
func DistinctOutputs(outputs map[string][]*image.RGBA) error {
	keys := slices.Sorted(maps.Keys(outputs))
	for i, a := range keys {
		for _, b := range keys[i+1:] {
			if len(outputs[a]) == 0 || len(outputs[b]) == 0 {
				continue
			}
			if d := OutputDistance(outputs[a], outputs[b]); d < MinOutputDistance {
				return fail("distinct-outputs", "inputs %s and %s gave one picture (mean difference %.2f of 255 in %dx%d box means, under %g): the output does not depend on what was asked",
					a, b, d, OutputBox, OutputBox, MinOutputDistance)
			}
		}
	}
	return nil
}

// SeedInfluence is the check "seed-influence": one request at two seeds (what) gives two
// pictures. An output that does not depend on the seed is what a Task that ignores it (a fixed
// generator) gives, on the native path too, so identity agrees with it.
func SeedInfluence(what string, a, b []*image.RGBA) error {
	if d := OutputDistance(Coarse(a), Coarse(b)); d < MinOutputDistance {
		return fail("seed-influence", "%s gave one picture (mean difference %.2f of 255 in %dx%d box means, under %g): the output does not depend on the seed",
			what, d, OutputBox, OutputBox, MinOutputDistance)
	}
	return nil
}
