package qualify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// refusal is one request with one setting the row does not honour.
type refusal struct {
	field, value string
}

// refusals is the serve stage's last step. The contract is that a server honours or refuses
// every setting; the actual-settings check holds it to what it served for the pinned inputs
// only, so a server that silently substituted an unsupported setting (clamped the steps,
// rounded the size) would pass. One request per control the row declares, each with one
// setting outside it (unsupportedSettings), must be refused with a 4xx naming that field, and
// no Task runs (check "refuses-unsupported"). An endpoint may honour more than the row
// declares, and its dialect may not name the field: for it both are findings.
func (c *caseRun) refusals(s *serving) (string, error) {
	items, err := c.items()
	if err != nil {
		return "", err
	}
	it := items[0]
	refusals := unsupportedSettings(c.Entry)
	var failed []error
	for i, r := range refusals {
		id := fmt.Sprintf("%s-refusal-%d", casePrefix(c.Entry.ID), i)
		c.own = append(c.own, id)
		fields := maps.Clone(it.fields)
		fields["model"], fields[r.field] = c.Entry.ID, r.value
		accepted, err := c.tryRefused(s, fields, it.ref, id)
		what := fmt.Sprintf("%s=%s", r.field, r.value)
		var ae *client.APIError
		switch {
		case accepted != "":
			if s.External {
				c.findings = append(c.findings, wire.Finding{Name: "unsupported-setting-accepted",
					Detail: fmt.Sprintf("%s, outside the row's controls, was accepted (%s)", what, accepted)})
				continue
			}
			failed = append(failed, check.Fail("refuses-unsupported", "%s, which the row does not offer, was accepted (%s): a server must honour or refuse each setting", what, accepted))
		case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
			if ae.Body.Param == r.field {
				continue
			}
			if s.External {
				c.findings = append(c.findings, wire.Finding{Name: "refusal-unnamed",
					Detail: fmt.Sprintf("%s was refused (HTTP %d) without naming the field (param %q)", what, ae.Status, ae.Body.Param)})
				continue
			}
			failed = append(failed, check.Fail("refuses-unsupported", "%s was refused (HTTP %d) naming param %q, not %s", what, ae.Status, ae.Body.Param, r.field))
		default:
			failed = append(failed, check.Fail("refuses-unsupported", "%s: want a 4xx refusal naming %s, got %v", what, r.field, err))
		}
	}
	if len(failed) > 0 {
		return "", errors.Join(failed...)
	}
	var names []string
	for _, r := range refusals {
		names = append(names, r.field+"="+r.value)
	}
	return "; refused, each naming its field: " + strings.Join(names, ", "), nil
}

// tryRefused sends one request that should be refused. A video job it created anyway is
// deleted (its Task is not waited for); accepted describes what was accepted.
func (c *caseRun) tryRefused(s *serving, fields map[string]string, ref []byte, id string) (accepted string, err error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.requestDeadline())
	defer cancel()
	if c.Entry.Workload == spec.TextToVideo {
		v, err := s.API.CreateVideo(ctx, fields, id)
		if err != nil {
			return "", err
		}
		if derr := s.API.DeleteVideo(ctx, v.ID); derr != nil {
			return "job " + v.ID + ", not deleted: " + derr.Error(), nil
		}
		return "job " + v.ID + ", deleted", nil
	}
	r, err := s.API.Edit(ctx, fields, ref, "reference.png", id)
	if err != nil {
		return "", err
	}
	return "edit " + r.ID + " served", nil
}

// unsupportedSettings are one setting outside each control e declares: a size it does not
// offer, steps and guidance past their ranges and, for video, an fps it does not offer and a
// frame count its rule does not allow.
func unsupportedSettings(e spec.Entry) []refusal {
	c := e.Controls
	size := e.Defaults.Size
	for c.AllowsSize(size) {
		size.W += 16
	}
	out := []refusal{
		{"size", size.String()},
		{"num_inference_steps", strconv.Itoa(c.Steps.Max + 1)},
		{c.GuidanceParam, strconv.FormatFloat(c.Guidance.Max+1, 'g', -1, 64)},
	}
	if e.Workload != spec.TextToVideo {
		return out
	}
	fps := slices.Max(c.FPS) + 1
	out = append(out, refusal{"fps", strconv.Itoa(fps)})
	if r := c.Frames; r != nil {
		n := r.Range.Max + 1
		for k := r.Range.Min; k <= r.Range.Max; k++ {
			if !r.Allows(k) {
				n = k
				break
			}
		}
		out = append(out, refusal{"num_frames", strconv.Itoa(n)})
	}
	return out
}
