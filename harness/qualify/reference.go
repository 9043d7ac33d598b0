package qualify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
)

// referenceOutputs is the row's criterion against the reference outputs its bundle carries
// (spec.ReferenceOutputsDir), nil where the row declares none.
func (c *caseRun) referenceOutputs() *referenceOutputs {
	if c.Entry.ReferenceOutputs == nil {
		return nil
	}
	return &referenceOutputs{dir: filepath.Join(bundle.Dir(c.Entry), spec.ReferenceOutputsDir), c: *c.Entry.ReferenceOutputs, lowest: 1}
}

type referenceOutputs struct {
	dir      string
	c        spec.ReferenceOutputs
	compared int
	lowest   float64            // the lowest mean SSIM seen
	ssim     map[string]float64 // input -> mean SSIM measured, passed or not
	written  bool               // this run wrote them: nothing to compare
}

// compare holds one native output's frames (nil when they could not be decoded) to the
// reference output for its input. A bundle without reference outputs compares nothing; one
// with them must have one for every pinned input.
func (r *referenceOutputs) compare(ctx context.Context, key string, got []*image.RGBA, w spec.Capability) error {
	if r == nil || r.written || !r.present() || got == nil {
		return nil
	}
	want, err := decodeAll(ctx, filepath.Join(r.dir, key+extension(w)), w)
	if err != nil {
		return check.Fail("reference-output", "%s: %w", key, err)
	}
	s, err := check.ReferenceOutput(got, want, r.c)
	if !math.IsNaN(s) && (err == nil || s != 0) {
		if r.ssim == nil {
			r.ssim = map[string]float64{}
		}
		r.ssim[key] = s
	}
	if err != nil {
		return err
	}
	r.compared++
	r.lowest = min(r.lowest, s)
	return nil
}

// write copies each native output to the reference-output directory when asked and the bundle
// has none yet: the adapter's exact recipe, for a later run on another machine or stack. It
// returns how many it wrote (and compare then has nothing to hold them to).
func (r *referenceOutputs) write(native nativeOutputs, w spec.Capability, asked bool) (int, error) {
	if r == nil || !asked || r.present() {
		return 0, nil
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return 0, err
	}
	rec := recipe{WrittenBy: "mediaqual's correctness stage (" + EnvWriteReferenceOutputs + "=1): the native path's outputs", Inputs: map[string]api.Actual{}}
	for key, n := range native {
		b, err := os.ReadFile(n.Path)
		if err == nil {
			err = os.WriteFile(filepath.Join(r.dir, key+extension(w)), b, 0o644)
		}
		if err != nil {
			return 0, fmt.Errorf("writing reference outputs: %w", err)
		}
		rec.Inputs[key] = n.Actual
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(r.dir, recipeFile), append(b, '\n'), 0o644)
	}
	if err != nil {
		return 0, fmt.Errorf("writing reference outputs: %w", err)
	}
	r.written = true
	return len(native), nil
}

// recipeFile, beside reference outputs this suite wrote, says what the native path ran for
// each (settings, precision, engine, layout): outputs keyed by their runtime, so a later
// comparison can say whether it ran the same one. Outputs made upstream carry none.
const recipeFile = "recipe.json"

type recipe struct {
	WrittenBy string                `json:"written_by"`
	Inputs    map[string]api.Actual `json:"inputs"`
}

// runtimeNote says how this run's runtime (engine, layout) stands to the one the reference
// outputs were made with: the same, another (bytes may then differ; the SSIM criterion still
// holds them), or unknown (made elsewhere, no recipe).
func (r *referenceOutputs) runtimeNote(native nativeOutputs) string {
	b, err := os.ReadFile(filepath.Join(r.dir, recipeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "made elsewhere (no " + recipeFile + "): their engine and layout are unknown"
	}
	var rec recipe
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		return fmt.Sprintf("their %s is unreadable (%v)", recipeFile, err)
	}
	runtime := func(a api.Actual) string {
		return fmt.Sprintf("engine %s, layout %s", cmp.Or(a.Engine, "-"), cmp.Or(a.Layout, "-"))
	}
	keys := slices.Sorted(maps.Keys(native))
	if len(keys) == 0 {
		return "no native outputs to place against them"
	}
	var other []string
	for _, key := range keys {
		was, ok := rec.Inputs[key]
		now := native[key].Actual
		if !ok {
			other = append(other, key+": not in "+recipeFile)
		} else if runtime(was) != runtime(now) {
			other = append(other, fmt.Sprintf("%s: made with %s, this run %s", key, runtime(was), runtime(now)))
		}
	}
	if len(other) > 0 {
		return "another runtime, so bytes may differ (" + strings.Join(other, "; ") + ")"
	}
	return "made with this run's runtime (" + runtime(native[keys[0]].Actual) + ")"
}

func (r *referenceOutputs) present() bool {
	_, err := os.Stat(r.dir)
	return !errors.Is(err, fs.ErrNotExist)
}

func (r *referenceOutputs) summary(native nativeOutputs) string {
	if !r.present() {
		return "the bundle carries no reference outputs (" + spec.ReferenceOutputsDir + "/): not compared"
	}
	return fmt.Sprintf("%d outputs match the bundle's reference outputs (lowest mean SSIM %.3f, at least %.3f; %s)",
		r.compared, r.lowest, r.c.MinSSIM, r.runtimeNote(native))
}

// servedAgainstReferences says what holds the served outputs when there is no native path: the
// bundle's reference outputs, compared with them in the artifacts stage, or nothing.
func (c *caseRun) servedAgainstReferences() string {
	if r := c.referenceOutputs(); r != nil && r.present() {
		return "the served outputs are held to the bundle's reference outputs in the artifacts stage instead"
	}
	return "and no reference outputs here (" + spec.ReferenceOutputsDir + "/ in the bundle) to hold the served outputs to: their correctness rests on the family's criteria alone"
}
