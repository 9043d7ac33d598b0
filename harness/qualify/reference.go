package qualify

import (
	"context"
	"errors"
	"fmt"
	"image"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"mediaqual/harness/check"
	"mediaqual/models/bundle"
	"mediaqual/models/spec"
)

// referenceOutputs is the row's criterion against the reference outputs its bundle carries
// (spec.ReferenceOutputsDir), nil where the row declares none.
func (c *Case) referenceOutputs() *referenceOutputs {
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
		return fmt.Errorf("check reference-output: %s: %w", key, err)
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
func (r *referenceOutputs) write(native Native, w spec.Capability, asked bool) (int, error) {
	if r == nil || !asked || r.present() {
		return 0, nil
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return 0, err
	}
	for key, n := range native {
		b, err := os.ReadFile(n.Path)
		if err == nil {
			err = os.WriteFile(filepath.Join(r.dir, key+extension(w)), b, 0o644)
		}
		if err != nil {
			return 0, fmt.Errorf("writing reference outputs: %w", err)
		}
	}
	r.written = true
	return len(native), nil
}

func (r *referenceOutputs) present() bool {
	_, err := os.Stat(r.dir)
	return !errors.Is(err, fs.ErrNotExist)
}

func (r *referenceOutputs) summary() string {
	if !r.present() {
		return "the bundle carries no reference outputs (" + spec.ReferenceOutputsDir + "/): not compared"
	}
	return fmt.Sprintf("%d outputs match the bundle's reference outputs (lowest mean SSIM %.3f, at least %.3f)", r.compared, r.lowest, r.c.MinSSIM)
}
