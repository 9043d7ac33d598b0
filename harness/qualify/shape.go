package qualify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
func (c *caseRun) shapeProbe(s *serving) (string, error) {
	if s == nil {
		return "", nil // the serve stage failed; the aiperf stage says so
	}
	items, err := c.items()
	if err != nil {
		return "", err
	}
	it := items[0]
	id := casePrefix(c.Entry.ID) + "-shape-probe"
	st, ok := probeSettings(c.Entry)
	var probe func(st spec.Settings, id string) ([]byte, error)
	var did string
	if c.Entry.Workload == spec.TextToVideo {
		if !ok {
			return "; no shape probe (the row offers one shape)", nil
		}
		did = fmt.Sprintf("one clip at %s, %d frames, %s", st.Size, st.NumFrames, stepsText(st.Steps))
		probe = func(st spec.Settings, id string) ([]byte, error) {
			return c.probeClip(s, st, it.fields["prompt"], id)
		}
	} else {
		w := c.Entry.Defaults.Size.W
		rh := w * 9 / 16 / 16 * 16 // a 16:9 reference of the pinned width (a multiple of 16 rows)
		if it.ref, err = fixtures.Image(it.image, w, rh); err != nil {
			return "", err
		}
		st.Prompt = it.asked.Prompt
		did = fmt.Sprintf("one edit of a %dx%d reference, %s", w, rh, stepsText(st.Steps))
		probe = func(st spec.Settings, id string) ([]byte, error) {
			it.fields, it.asked = st.Fields(c.Entry.Controls, c.Entry.Workload), asked(c.Entry, st)
			c.own = append(c.own, id)
			png, err := c.edit(s, it, id)
			if err != nil {
				return nil, check.Fail("shape-probe", "%s, %s: %w", id, did, err)
			}
			return png, nil
		}
	}
	first, err := probe(st, id)
	if err != nil {
		return "", err
	}
	msg := "; shape probe: " + did + ", before the pinned inputs"
	if c.Entry.SeedFree {
		return msg + "; seed influence not checked (the row's output does not depend on the seed)", nil
	}
	// The same request at the next seed must give other bytes: an output that does not depend
	// on the seed is one a Task that ignores it (a fixed generator) gives, on the native path
	// too, so identity agrees with it.
	other := st
	other.Seed++
	second, err := probe(other, id+"-seed")
	if err != nil {
		return "", err
	}
	if err := c.seedInfluence(fmt.Sprintf("the probe (%s) at seed %d and at seed %d", did, st.Seed, other.Seed), first, second); err != nil {
		return "", err
	}
	return msg + fmt.Sprintf("; at seed %d it differs from seed %d", other.Seed, st.Seed), nil
}

// probeClip is one probe clip at st, within one request deadline: created, waited for, held to
// the settings asked, downloaded and deleted. The job is deleted whatever happens after it was
// created (with its own deadline, and the profile's delete answer), so a probe that fails leaves
// nothing running. An endpoint that reports no actual is held to what its profile reads of the
// job (vLLM-Omni's frame count and fps), and ownSettings names the rest as a limit. Returns the
// MP4.
func (c *caseRun) probeClip(s *serving, st spec.Settings, prompt, id string) (mp4 []byte, err error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.requestDeadline())
	defer cancel()
	shape := fmt.Sprintf("%s, %d frames, %s, seed %d", st.Size, st.NumFrames, stepsText(st.Steps), st.Seed)
	fields := st.Fields(c.Entry.Controls, c.Entry.Workload)
	fields["model"], fields["prompt"] = c.Entry.ID, prompt
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
	if err := c.ownSettings(s, id, asked(c.Entry, st), done.Actual, done.Raw["actual"] != nil); err != nil {
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
