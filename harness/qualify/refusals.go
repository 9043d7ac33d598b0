package qualify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // an endpoint may answer an edit with a JPEG (SGLang's default output format)
	_ "image/png"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/media"
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
// no Task runs (check "refuses-unsupported"). An accepted one is followed to its output, which
// is held to the setting asked (accepted): a silent clamp or substitution fails
// refuses-unsupported for any server. An endpoint may honour more than the row declares, its
// dialect may not name the field, and it may fail the job it accepted: for it those are
// findings.
func (c *caseRun) refusals(s *serving) (string, error) {
	items, err := c.items()
	if err != nil {
		return "", err
	}
	it := items[0]
	var failed []error
	var refused, found []string
	for i, r := range unsupportedSettings(c.Entry) {
		id := fmt.Sprintf("%s-refusal-%d", casePrefix(c.Entry.ID), i)
		c.own = append(c.own, id)
		fields := maps.Clone(it.fields)
		fields["model"], fields[r.field] = c.Entry.ID, r.value
		what := fmt.Sprintf("%s=%s", r.field, r.value)
		acc, err := c.tryRefused(s, r, fields, it.ref, id)
		var ae *client.APIError
		switch {
		case err != nil && errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
			if s.Profile.Field(ae.Body.Param) == r.field {
				refused = append(refused, what)
				continue
			}
			if s.External {
				found = append(found, what)
				c.findings = append(c.findings, wire.Finding{Name: "refusal-unnamed",
					Detail: fmt.Sprintf("%s was refused (HTTP %d) without naming the field (param %q)", what, ae.Status, ae.Body.Param)})
				continue
			}
			failed = append(failed, check.Fail("refuses-unsupported", "%s was refused (HTTP %d) naming param %q, not %s", what, ae.Status, ae.Body.Param, r.field))
		case err != nil:
			failed = append(failed, check.Fail("refuses-unsupported", "%s: want a 4xx refusal naming %s, got %v", what, r.field, err))
		case acc.changed != "":
			failed = append(failed, check.Fail("refuses-unsupported", "%s, which the row does not offer, was accepted and silently changed: %s (%s)", what, acc.changed, acc.job))
		case !s.External:
			failed = append(failed, check.Fail("refuses-unsupported", "%s, which the row does not offer, was accepted (%s; %s): a server must honour or refuse each setting", what, acc.job, acc.outcome))
		default:
			found = append(found, what)
			c.findings = append(c.findings, wire.Finding{Name: "unsupported-setting-accepted",
				Detail: fmt.Sprintf("%s, outside the row's controls, was accepted (%s): %s", what, acc.job, acc.outcome)})
		}
	}
	if len(failed) > 0 {
		return "", errors.Join(failed...)
	}
	msg := ""
	if len(refused) > 0 {
		msg = "; refused, each naming its field: " + strings.Join(refused, ", ")
	}
	if len(found) > 0 {
		msg += fmt.Sprintf("; %d not refused by name (findings): %s", len(found), strings.Join(found, ", "))
	}
	return msg, nil
}

// accepted is what became of a request the server should have refused.
type accepted struct {
	job     string // "job <id>" or "edit <id>"
	outcome string // honoured (what was produced), failed (the job's error), or not observable
	changed string // set when the output shows another setting than asked: a silent substitution
}

// tryRefused sends one request that should be refused. One the server accepts is followed to
// its output (a video job waited for within the request deadline, its content probed, then
// deleted; an edit's image decoded), held to the setting asked: the size, frame count and fps
// are read from the output itself, the steps and guidance only from what the server reports
// (its actual), since the bytes cannot show them.
func (c *caseRun) tryRefused(s *serving, r refusal, fields map[string]string, ref []byte, id string) (accepted, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.requestDeadline())
	defer cancel()
	if c.Entry.Workload != spec.TextToVideo {
		e, err := s.API.Edit(ctx, fields, ref, "reference.png", id)
		if err != nil {
			return accepted{}, err
		}
		acc := accepted{job: "an edit answered with no id"}
		if e.ID != "" {
			acc.job = "edit " + e.ID
		}
		var got string
		if cfg, _, err := image.DecodeConfig(bytes.NewReader(e.PNG)); err == nil {
			got = fmt.Sprintf("%dx%d", cfg.Width, cfg.Height)
		}
		_, reported := e.Raw["actual"]
		acc.outcome, acc.changed = heldTo(r, observed{size: got}, e.Actual, reported)
		return acc, nil
	}
	v, err := s.API.CreateVideo(ctx, fields, id)
	if err != nil {
		return accepted{}, err
	}
	acc := accepted{job: "job " + v.ID}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.requestDeadline())
		defer dcancel()
		if derr := s.API.DeleteVideo(dctx, v.ID); derr != nil {
			acc.job += ", not deleted: " + derr.Error()
		}
	}()
	done, _, err := s.API.WaitVideo(ctx, v.ID)
	switch {
	case err != nil:
		acc.outcome = "not followed to its end: " + err.Error()
		return acc, nil
	case done.Status != client.StatusCompleted:
		acc.outcome = fmt.Sprintf("then the job %s: %v", done.Status, done.Error)
		return acc, nil
	}
	mp4, _, err := s.API.Content(ctx, v.ID)
	if err != nil {
		acc.outcome = "its content could not be fetched: " + err.Error()
		return acc, nil
	}
	path := filepath.Join(c.Dir, "refusals", id+".mp4")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return acc, err
	}
	if err := os.WriteFile(path, mp4, 0o644); err != nil {
		return acc, err
	}
	pr, err := media.FFprobe(ctx, path)
	if err != nil {
		acc.changed = "its content is not a video ffprobe reads: " + err.Error()
		return acc, nil
	}
	o := observed{size: fmt.Sprintf("%dx%d", pr.Width, pr.Height), frames: pr.Frames, fps: pr.FPS.RatString()}
	_, reported := done.Raw["actual"]
	acc.outcome, acc.changed = heldTo(r, o, done.Actual, reported)
	return acc, nil
}

// observed is what an output shows of itself.
type observed struct {
	size, fps string
	frames    int
}

// heldTo compares the one setting r asked with the output (size, frames, fps) or, for steps and
// guidance, with the server's actual where it reports one. outcome says what was found; changed
// is set when the output shows another value than asked.
func heldTo(r refusal, o observed, a client.Actual, reported bool) (outcome, changed string) {
	var got string
	switch r.field {
	case "size":
		got = o.size
	case "num_frames":
		got = strconv.Itoa(o.frames)
	case "fps":
		got = o.fps
	default:
		if !reported {
			return "whether it was honoured cannot be told: the output cannot show " + r.field + " and the server reports no actual", ""
		}
		if r.field == "num_inference_steps" {
			got = strconv.Itoa(a.Steps)
		} else {
			got = strconv.FormatFloat(a.Guidance, 'g', -1, 64)
		}
	}
	if got != r.value {
		return "", fmt.Sprintf("%s %s asked, %s produced", r.field, r.value, got)
	}
	return fmt.Sprintf("honoured: %s %s produced", r.field, got), ""
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
