package qualify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mediaqual/mediaqual/fixtures"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// shapeProbe is the aiperf stage's first step: one request of another shape than the pinned
// inputs' before AIPerf sends them, so that the served path has seen a second shape when
// identity compares it with the native path (which never has). A runtime whose bytes depend on
// what it served before (a compiled engine that recompiled for the other shape and then served
// the pinned one with the new kernels, issue #26) then fails identity. A video row asks for
// another size it offers and another frame count (probeSettings); an edit row sends its first
// reference at another aspect ratio (the output size stays the pinned one). Either at the
// fewest steps the row allows: the probe needs one pass through another shape, and a full
// request there runs uncompiled (Wan2.2's 704x1280x121 clip, 50 steps: minutes). The request
// must complete with the settings asked; its request id is the suite's own, which the aiperf
// stage's accounting does not hold against the server. Returns what it did, for the stage's
// message.
func (c *caseRun) shapeProbe(s *serving, native nativeOutputs) (string, error) {
	if s == nil {
		return "", nil // the serve stage failed; the aiperf stage says so
	}
	probes, did, err := c.probeItems()
	if err != nil || probes == nil {
		return did, err
	}
	var outs [][]byte
	var unlike []error // probe-identity's, reported with seed influence's: each is its own evidence
	for _, it := range probes {
		id := casePrefix(c.Entry.ID) + "-" + it.key
		var out []byte
		if c.Entry.Workload == spec.TextToVideo {
			out, err = c.probeClip(s, it, id)
		} else {
			c.own = append(c.own, id)
			if out, err = c.edit(s, it, id); err != nil {
				err = check.Fail("shape-probe", "%s, %s: %w", id, did, err)
			}
		}
		if err != nil {
			return "", err
		}
		unlike = append(unlike, c.probeNative(native, it, out))
		outs = append(outs, out)
	}
	if err := errors.Join(unlike...); err != nil && len(outs) < 2 {
		return "", err
	}
	msg := "; shape probe: " + did + ", before the pinned inputs"
	if len(native) > 0 {
		msg += ", equal to the native path's output for the same inputs"
	}
	if len(outs) < 2 {
		return msg + "; seed influence not checked (the row's output does not depend on the seed)", nil
	}
	// The same request at the next seed must give other bytes: an output that does not depend
	// on the seed is one a Task that ignores it (a fixed generator) gives, on the native path
	// too, so identity agrees with it.
	first, other := probes[0].asked.Seed, probes[1].asked.Seed
	if err := errors.Join(append(unlike, c.seedInfluence(fmt.Sprintf("the probe (%s) at seed %d and at seed %d", did, first, other), outs[0], outs[1]))...); err != nil {
		return "", err
	}
	return msg + fmt.Sprintf("; at seed %d it differs from seed %d", other, first), nil
}

// probeItems are the shape probe's inputs, for the served path and the native path alike:
// the first pinned input at another shape (probeSettings; an edit's reference at 16:9 of the
// pinned width) and at the fewest steps, and the same at the next seed unless the row's output
// does not depend on it. None, with a note, for a video row that offers one shape. did says
// what the probe asks.
func (c *caseRun) probeItems() (probes []workItem, did string, err error) {
	items, err := c.items()
	if err != nil {
		return nil, "", err
	}
	it := items[0]
	st, ok := probeSettings(c.Entry)
	st.Prompt = it.asked.Prompt
	if c.Entry.Workload == spec.TextToVideo {
		if !ok {
			return nil, "; no shape probe (the row offers one shape)", nil
		}
		did = fmt.Sprintf("one clip at %s, %d frames, %s", st.Size, st.NumFrames, stepsText(st.Steps))
		it.ref = nil
	} else {
		w := c.Entry.Defaults.Size.W
		rh := w * 9 / 16 / 16 * 16 // a 16:9 reference of the pinned width (a multiple of 16 rows)
		if it.ref, err = fixtures.Image(it.image, w, rh); err != nil {
			return nil, "", err
		}
		did = fmt.Sprintf("one edit of a %dx%d reference, %s", w, rh, stepsText(st.Steps))
	}
	at := func(key string, st spec.Settings) workItem {
		p := it
		p.key, p.fields, p.asked, p.st = key, st.Fields(c.Entry.Controls, c.Entry.Workload), asked(c.Entry, st), st
		p.fields["prompt"] = st.Prompt
		return p
	}
	probes = []workItem{at("shape-probe", st)}
	if !c.Entry.SeedFree {
		st.Seed++
		probes = append(probes, at("shape-probe-seed", st))
	}
	return probes, did, nil
}

// probeNative is the check "probe-identity": a probe's served output equals the native path's
// for the same inputs (bytes, or decoded frames against the suite's own in-process encoding),
// where there is a native path. A server whose output at another shape than the pinned one is
// not the model's (a reference cropped to the output's aspect instead of resized, a clip's
// frames resampled) passes every check that looks at the pinned shape alone.
func (c *caseRun) probeNative(native nativeOutputs, it workItem, out []byte) error {
	n, ok := native[it.key]
	if !ok {
		return nil // no native path here: the identity stage says so
	}
	path := filepath.Join(c.Dir, "probe", it.key+"-served"+extension(c.Entry.Workload))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return err
	}
	decoded, err := c.frameDigests(path, nil)
	if err != nil {
		return check.Fail("probe-identity", "the %s output does not decode: %v", it.key, err)
	}
	if n.Decoded == nil {
		if n.Decoded, err = c.frameDigests(n.Path, nil); err != nil {
			return fmt.Errorf("native %s: %w", it.key, err)
		}
	}
	if same := c.sameAsNative(path, digest(out), decoded, n); same != nil {
		return check.Fail("probe-identity", "the %s output (%s) is not the native path's for the same inputs: %v", it.key, it.asked.Size, same)
	}
	return nil
}

// probeClip is one probe clip, within one request deadline: created, waited for, held to the
// settings asked, downloaded and deleted. The job is deleted whatever happens after it was
// created (with its own deadline, and the profile's delete answer), so a probe that fails leaves
// nothing running. An endpoint that reports no actual is held to what its profile reads of the
// job (vLLM-Omni's frame count and fps), and ownSettings names the rest as a limit. Returns the
// MP4.
func (c *caseRun) probeClip(s *serving, it workItem, id string) (mp4 []byte, err error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.requestDeadline())
	defer cancel()
	a := it.asked
	shape := fmt.Sprintf("%s, %d frames, %s, seed %d", a.Size, a.NumFrames, stepsText(a.Steps), a.Seed)
	fields := map[string]string{"model": c.Entry.ID}
	for k, v := range it.fields {
		fields[k] = v
	}
	c.own = append(c.own, id)
	v, err := s.API.CreateVideo(ctx, fields, id)
	if err != nil {
		return nil, check.Fail("shape-probe", "%s at %s: %w", id, shape, err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.requestDeadline())
		defer dcancel()
		if derr := s.API.DeleteVideo(dctx, v.ID); derr != nil {
			err = errors.Join(err, check.Fail("shape-probe", "deleting %s: %w", v.ID, derr))
		}
	}()
	done, _, err := s.API.WaitVideo(ctx, v.ID)
	if err != nil {
		return nil, check.Fail("shape-probe", "%s at %s: %w", id, shape, err)
	}
	if done.Status != "completed" {
		return nil, check.Fail("shape-probe", "%s at %s ended %s: %v", id, shape, done.Status, done.Error)
	}
	if err := c.ownSettings(s, id, a, done.Actual, done.Raw["actual"] != nil); err != nil {
		return nil, err
	}
	if err := c.producedAsAsked(s, fields, done); err != nil {
		return nil, err
	}
	mp4, _, err = s.API.Content(ctx, v.ID)
	if err != nil {
		return nil, check.Fail("shape-probe", "%s at %s: downloading %s: %w", id, shape, v.ID, err)
	}
	return mp4, nil
}

// producedAsAsked is the check "actual-settings" on a job from an endpoint that reports no
// actual: what its profile reads of the job (vLLM-Omni's frame count and fps) against what was
// asked.
func (c *caseRun) producedAsAsked(s *serving, fields map[string]string, done client.Video) error {
	if !s.External || done.Raw["actual"] != nil {
		return nil
	}
	b, err := json.Marshal(done.Raw)
	if err != nil {
		return err
	}
	wv, _, err := s.Profile.ParseVideo(b)
	if err != nil {
		return err
	}
	if fs := wire.ProducedAsAsked(fields, wv); len(fs) > 0 {
		return check.Fail("actual-settings", "%s reports another job than was asked: %v", done.ID, fs)
	}
	return nil
}

func stepsText(n int) string {
	if n == 1 {
		return "1 step"
	}
	return fmt.Sprintf("%d steps", n)
}

// probeSettings are the shape probe's settings: the pinned ones at the fewest steps the row
// allows and, for video, another size it offers and the smallest frame count its rule allows
// other than the pinned one. ok is whether that is another shape (an edit's other shape is
// its reference's, which the probe chooses).
func probeSettings(e spec.Entry) (spec.Settings, bool) {
	st := e.Defaults
	if e.Controls.Steps.Min > 0 {
		st.Steps = e.Controls.Steps.Min
	}
	if e.Workload != spec.TextToVideo {
		return st, true
	}
	if size, ok := otherSize(e); ok {
		st.Size = size
	}
	if r := e.Controls.Frames; r != nil {
		for n := r.Range.Min; n <= r.Range.Max; n++ {
			if n != st.NumFrames && r.Allows(n) {
				st.NumFrames = n
				break
			}
		}
	}
	return st, st.Size != e.Defaults.Size || st.NumFrames != e.Defaults.NumFrames
}

// otherSize is the first size e offers other than its pinned one.
func otherSize(e spec.Entry) (spec.Size, bool) {
	for _, s := range e.Controls.Sizes {
		if s != e.Defaults.Size {
			return s, true
		}
	}
	return spec.Size{}, false
}
