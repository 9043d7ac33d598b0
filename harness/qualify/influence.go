package qualify

import (
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
)

// influence is the stage "influence", the reference-influence probe of image_edit: the same
// instruction on two different pinned references.
func (c *caseRun) influence(s *serving) (string, error) {
	if s == nil {
		return "", errors.New("no server: the serve stage failed")
	}
	items, err := c.items()
	if err != nil {
		return "", err
	}
	if len(items) < 2 {
		return "", fmt.Errorf("the influence probe needs two references; fixture set has %d", len(items))
	}
	a, b := items[0], items[1]
	b.fields, b.asked = a.fields, a.asked // same instruction and settings, other reference
	pa, err := c.edit(s, a, casePrefix(c.Entry.ID)+"-influence-a")
	if err != nil {
		return "", err
	}
	pb, err := c.edit(s, b, casePrefix(c.Entry.ID)+"-influence-b")
	if err != nil {
		return "", err
	}
	imgs := make([]image.Image, 4)
	for i, src := range [][]byte{pa, pb, a.ref, b.ref} {
		if imgs[i], err = media.DecodeImageBytes(src); err != nil {
			return "", err
		}
	}
	gap, err := check.Influence(imgs[0], imgs[1], imgs[2], imgs[3])
	c.Row.Gap = gap
	return check.InfluenceVerdict(gap, err, c.Entry.ExpectGap)
}

// edit is the suite's own image edit (for the influence probe, not load): one request through
// the client, its PNG checked against the declared digest (when declared) and kept.
func (c *caseRun) edit(s *serving, it workItem, requestID string) ([]byte, error) {
	return c.editWithin(c.ctx, s, it, requestID)
}

// editWithin is edit within ctx.
func (c *caseRun) editWithin(ctx context.Context, s *serving, it workItem, requestID string) ([]byte, error) {
	// output_format png, as AIPerf's requests name it (extraInputs): a server with another
	// default (SGLang's jpg) then answers the suite's edits in the same format as AIPerf's.
	fields := map[string]string{"model": c.Entry.ID, "output_format": "png"}
	for k, v := range it.fields {
		fields[k] = v
	}
	r, err := s.API.Edit(ctx, fields, it.ref, "reference.png", requestID)
	if err != nil {
		return nil, err
	}
	if r.SHA256 != "" || !s.External {
		if err := check.Digest("artifact-digest", digest(r.PNG), r.SHA256); err != nil {
			return nil, err
		}
	}
	if err := c.ownSettings(s, requestID, it.asked, r.Actual, r.Raw["actual"] != nil); err != nil {
		return nil, err
	}
	c.claimTask(requestID, r.Timing.TaskCallWallMS, r.InferenceTimeS)
	path := filepath.Join(c.Dir, "probe", requestID+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return r.PNG, os.WriteFile(path, r.PNG, 0o644)
}

func casePrefix(id string) string {
	return strings.NewReplacer("/", "_", ".", "_").Replace(id)
}

// seedInfluence is the check "seed-influence" on two probe outputs (what): their decoded frames
// must be two pictures, not one with other bytes.
func (c *caseRun) seedInfluence(what string, a, b []byte) error {
	var frames [2][]*image.RGBA
	for i, data := range [][]byte{a, b} {
		path := filepath.Join(c.Dir, "probe", fmt.Sprintf("seed-%d%s", i, extension(c.Entry.Workload)))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		var err error
		if frames[i], err = c.decodeAll(path); err != nil {
			return check.Fail("shape-probe", "%s: decoding its output: %w", what, err)
		}
	}
	return check.SeedInfluence(what, frames[0], frames[1])
}

// ownSettings is check actual-settings on what the server reports it produced for one of the
// suite's own requests (a probe), video or edit alike: held to what was asked wherever an
// actual is reported, and a launched mediaserve must report one; an endpoint that reports none
// is "not reported", as for the AIPerf run's artifacts: not failed, and the row capped.
func (c *caseRun) ownSettings(s *serving, requestID string, asked api.Settings, actual api.Actual, reported bool) error {
	if !reported && s.External {
		why := "actual-settings not reported: the endpoint reports no actual for the suite's own requests (" + requestID + "), so an ignored setting cannot be told from an honoured one"
		if !slices.ContainsFunc(c.Row.Limits, func(l reports.Limit) bool { return l.Why == why }) {
			c.limit(spec.Implemented, why)
		}
		return nil
	}
	if err := check.Settings(asked, actual); err != nil {
		return fmt.Errorf("probe %s: %w", requestID, err)
	}
	return nil
}
