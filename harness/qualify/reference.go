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
	rec := recipe{WrittenBy: "mediaqual's correctness stage (" + EnvWriteReferenceOutputs + "=1): the native path's outputs",
		Pipeline: suitePipeline, Inputs: map[string]api.Actual{}}
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

// recipeFile, beside reference outputs, says what made them: the pipeline (this suite's
// native path, or another one, named), and for those this suite wrote what the native path ran
// for each (settings, precision, engine, layout), so a later comparison can say whether it ran
// the same runtime.
const recipeFile = "recipe.json"

// suitePipeline is recipe.Pipeline for outputs this suite's correctness stage wrote: a later
// run is then held to an earlier one of the same pipeline (a regression baseline), never to
// outputs made elsewhere.
const suitePipeline = "mediaqual native path"

type recipe struct {
	WrittenBy string `json:"written_by"`
	// Pipeline names what made the outputs: suitePipeline, or another pipeline (e.g. "plain
	// diffusers 0.42.1 WanPipeline, docs/GPU.md's recipe"); only another one's outputs hold
	// this suite's pipeline to something it did not make.
	Pipeline string                `json:"pipeline,omitempty"`
	Inputs   map[string]api.Actual `json:"inputs"`
}

// Where the bundle's reference outputs came from (referenceOutputs.origin).
const (
	originSuite   = "suite"   // this suite wrote them: a regression baseline
	originOther   = "other"   // another pipeline, named by their recipe
	originUnnamed = "unnamed" // no recipe names what made them
)

// origin says who made the reference outputs: originSuite (the recipe says this suite wrote
// them), originOther with the pipeline's name, or originUnnamed with why.
func (r *referenceOutputs) origin() (string, string) {
	b, err := os.ReadFile(filepath.Join(r.dir, recipeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return originUnnamed, "no " + recipeFile + " names the pipeline that made them"
	}
	var rec recipe
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	switch {
	case err != nil:
		return originUnnamed, fmt.Sprintf("their %s is unreadable (%v)", recipeFile, err)
	case rec.Pipeline == suitePipeline || strings.Contains(rec.WrittenBy, EnvWriteReferenceOutputs):
		return originSuite, "written by this suite (" + recipeFile + ": " + EnvWriteReferenceOutputs + "=1)"
	case strings.TrimSpace(rec.Pipeline) == "":
		return originUnnamed, "their " + recipeFile + " names no pipeline"
	}
	return originOther, rec.Pipeline
}

// capWhy is why the bundle's reference outputs leave the family-validated cap in place, ""
// where they lift it: outputs of another pipeline, named by their recipe.
func (r *referenceOutputs) capWhy() string {
	if r == nil || !r.present() {
		return "the bundle carries no reference outputs (" + spec.ReferenceOutputsDir + "/): the served outputs equal the native path's, but nothing made elsewhere holds that pipeline's outputs"
	}
	switch kind, why := r.origin(); kind {
	case originSuite:
		return "the bundle's reference outputs were " + why + ": a regression baseline of the same pipeline, not outputs made elsewhere"
	case originUnnamed:
		return "the bundle's reference outputs are not known to be made elsewhere: " + why
	}
	return ""
}

// runtimeNote says how this run's runtime (engine, layout) stands to the one the reference
// outputs were made with: the same, another (bytes may then differ; the SSIM criterion still
// holds them), or unknown (made elsewhere, no recipe).
func (r *referenceOutputs) runtimeNote(native nativeOutputs) string {
	b, err := os.ReadFile(filepath.Join(r.dir, recipeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "made by a pipeline no " + recipeFile + " names: their engine and layout are unknown"
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
	if kind, name := r.origin(); kind == originOther && len(rec.Inputs) == 0 {
		return "made by " + name + ": their engine and layout are its own"
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
	what := "the bundle's reference outputs"
	switch kind, name := r.origin(); kind {
	case originSuite:
		what = "the regression baseline this suite wrote earlier (" + recipeFile + ": " + EnvWriteReferenceOutputs + "=1; the same pipeline, so a change shows, not an error both runs share)"
	case originOther:
		what += ", made by " + name
	}
	return fmt.Sprintf("%d outputs match %s (lowest mean SSIM %.3f, at least %.3f; %s)",
		r.compared, what, r.lowest, r.c.MinSSIM, r.runtimeNote(native))
}

// servedAgainstReferences says what holds the served outputs when there is no native path: the
// bundle's reference outputs, compared with them in the artifacts stage, or nothing.
func (c *caseRun) servedAgainstReferences() string {
	if r := c.referenceOutputs(); r != nil && r.present() {
		if kind, _ := r.origin(); kind == originSuite {
			return "the served outputs are held to the regression baseline this suite wrote earlier (the bundle's reference outputs) in the artifacts stage instead"
		}
		return "the served outputs are held to the bundle's reference outputs in the artifacts stage instead"
	}
	return "and no reference outputs here (" + spec.ReferenceOutputsDir + "/ in the bundle) to hold the served outputs to: their correctness rests on the family's criteria alone"
}
