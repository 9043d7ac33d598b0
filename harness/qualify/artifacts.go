package qualify

import (
	"errors"
	"fmt"
	"image"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// artifactSet is what the artifacts stage established: each request of the AIPerf run with its
// artifact fetched, kept and checked.
type artifactSet struct {
	Run    aiperfRun
	Served []artifact // in the run's order
}

// artifact is one request's fetched artifact.
type artifact struct {
	aiperfRequest
	Path    string
	SHA256  string
	Decoded []string // digests of its decoded frames
	PSNR    float64  // of the decoded artifact against its raw frames, when measured
}

// measured are the artifacts of the requests outside warmup.
func (a artifactSet) measured() []artifact {
	var out []artifact
	for _, s := range a.Served {
		if !s.Warmup {
			out = append(out, s)
		}
	}
	return out
}

// fetchArtifacts is the stage "artifacts": the artifact of every request of the AIPerf run
// (AIPerf throws videos away) fetched, held to the digest the server declared, and put
// through every artifact check.
func (c *caseRun) fetchArtifacts(s *serving, native nativeOutputs, run aiperfRun) (_ artifactSet, summary string, _ error) {
	out := artifactSet{Run: run}
	if len(run.Requests) == 0 {
		return out, "", errors.New("no AIPerf requests to check: the aiperf stage failed")
	}
	var failed []error                    // every artifact is fetched and kept; each failure is listed
	byInput := map[string][]*image.RGBA{} // each input's first artifact, coarse, for distinct-outputs
	refs := c.referenceOutputs()
	enc := encodeCheck{native: native, contract: map[string][]*image.RGBA{}}
	defer func() {
		if refs != nil && len(refs.ssim) > 0 && len(native) == 0 {
			c.Row.ReferenceSSIM = refs.ssim
		}
	}()
	declared, unreported := 0, 0
	for _, r := range run.Requests {
		a := artifact{aiperfRequest: r}
		var data []byte
		var err error
		if c.Entry.Workload == spec.TextToVideo {
			if data, err = c.content(s, r.JobID); err != nil {
				return out, "", check.Fail("artifact-fetch", "request %s, completed job %s: %w", r.RequestID, r.JobID, err)
			}
		} else if data, err = check.EditResponse(r.raw); err != nil {
			return out, "", fmt.Errorf("request %s: %w", r.RequestID, err)
		}
		a.SHA256 = digest(data)
		switch {
		case r.declared.SHA256 != "":
			if err := check.Digest("ledger-digest", a.SHA256, r.declared.SHA256); err != nil {
				return out, "", fmt.Errorf("request %s (job %s): %w", r.RequestID, r.JobID, err)
			}
			declared++
		case !s.External:
			return out, "", check.Fail("ledger-digest", "request %s has no single completed ledger line", r.RequestID)
		}
		a.Path = filepath.Join(c.Dir, "http", fmt.Sprintf("%s-%s%s", r.item.key, r.JobID, extension(c.Entry.Workload)))
		if err := os.MkdirAll(filepath.Dir(a.Path), 0o755); err != nil {
			return out, "", err
		}
		if err := os.WriteFile(a.Path, data, 0o644); err != nil {
			return out, "", err
		}
		where := fmt.Sprintf("served %s (request %s, job %s)", r.item.key, r.RequestID, r.JobID)
		if r.actual == nil {
			if !s.External {
				failed = append(failed, fmt.Errorf("%s: %w", where, check.Fail("actual-settings", "the ledger's line reports no actual")))
			}
			unreported++
		} else if err := check.Settings(r.item.asked, *r.actual); err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", where, err))
		}
		frames, err := c.validate(a.Path, r.item)
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", where, err))
		}
		if a.Decoded, err = c.frameDigests(a.Path, frames); err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", where, err))
		}
		if _, ok := byInput[r.item.key]; !ok && frames != nil {
			byInput[r.item.key] = check.Coarse(frames)
			if len(native) == 0 {
				// No native path here: the bundle's reference outputs, if any, hold the served ones.
				if err := refs.compare(c.ctx, r.item.key, frames, c.Entry.Workload); err != nil {
					failed = append(failed, fmt.Errorf("%s: %w", where, err))
				}
			}
		}
		if frames != nil {
			var err error
			if a.PSNR, err = enc.measure(c, r, frames); err != nil {
				failed = append(failed, fmt.Errorf("%s: %w", where, err))
			}
		}
		out.Served = append(out.Served, a)
	}
	if err := check.DistinctOutputs(byInput); err != nil {
		failed = append(failed, err)
	}
	if err := c.showArtifact(out.measured()); err != nil {
		failed = append(failed, err)
	}
	if len(failed) > 0 {
		return out, "", errors.Join(failed...)
	}
	c.Row.Counts["artifacts_verified"] = len(out.Served)
	defer func() { summary += "; " + enc.summary() }()
	if refs != nil && refs.compared > 0 && len(native) == 0 {
		defer func() { summary += "; served " + refs.summary(nil) }()
	}
	if s.External {
		settings := "each one's actual settings equal to what was asked"
		if unreported > 0 {
			settings = fmt.Sprintf("actual settings not reported for %d of them", unreported)
			c.limit(spec.Implemented, fmt.Sprintf("actual-settings not reported: the endpoint reports no actual for %d of %d artifacts, so an ignored setting cannot be told from an honoured one", unreported, len(out.Served)))
		}
		return out, fmt.Sprintf("%d artifacts of the AIPerf run fetched and verified, %s; %d held to a digest the endpoint declared (it keeps no ledger the suite can read)", len(out.Served), settings, declared), nil
	}
	return out, fmt.Sprintf("%d artifacts of the AIPerf run fetched, matched to the ledger's digests and verified, each one's actual settings equal to what was asked", len(out.Served)), nil
}

// content fetches a video's content; from an endpoint, the answer is kept for the contract's
// assessment.
func (c *caseRun) content(s *serving, jobID string) ([]byte, error) {
	data, ctype, err := s.API.Content(c.ctx, jobID)
	if s.External {
		method, path := s.Profile.Path(s.Profile.VideoContent, jobID)
		step := wireStep("content", method, path)
		step.Response.Status, step.Response.ContentType = http.StatusOK, ctype
		if err != nil {
			step.Response.Status = statusOf(err)
		}
		c.steps = append(c.steps, step)
	}
	return data, err
}

// encodeCheck is check encode-psnr over a run's artifacts: each held to the native raw frames
// of its input, and a clip, where the server's contract fixes its encoder (mediaserve's),
// to the suite's own encode of them too; what could not be measured is named.
type encodeCheck struct {
	native   nativeOutputs
	contract map[string][]*image.RGBA // input -> the contract's encode of its raw frames
	measured int
	skipped  []string
}

func (e *encodeCheck) measure(c *caseRun, r aiperfRequest, frames []*image.RGBA) (float64, error) {
	n, ok := e.native[r.item.key]
	switch {
	case !ok:
		e.skip("no native raw frames here")
		return 0, nil
	case r.declared.FramesSHA256 != "" && r.declared.FramesSHA256 != n.FramesSHA256:
		// Other frames than the native path's: identity fails it; their encoding cannot be
		// measured against frames they are not.
		e.skip(fmt.Sprintf("%s (request %s): the server declares other raw frames than the native path's", r.item.key, r.RequestID))
		return 0, nil
	}
	var contract []*image.RGBA
	if c.Entry.Workload == spec.TextToVideo {
		if c.Config.Target.Profile.Name != wire.Mediaserve.Name {
			e.skip("the contract's encoder (its own, not mediaserve's): held to the raw frames' box means only")
		} else if contract, ok = e.contract[r.item.key]; !ok {
			pix, err := os.ReadFile(n.Raw)
			if err != nil {
				return 0, check.Fail("encode-psnr", "the native raw frames: %w", err)
			}
			v := spec.Video{W: frames[0].Rect.Dx(), H: frames[0].Rect.Dy(), N: len(frames), Pix: pix}
			start := time.Now()
			if contract, err = media.EncodeContract(c.ctx, v, c.Entry.Defaults.FPS, c.Dir); err != nil {
				return 0, check.Fail("encode-psnr", "%w", err)
			}
			// The timing stage's evidence that encoding these frames takes time (and decoding
			// them back, which this includes).
			c.suiteEncodeMS = max(c.suiteEncodeMS, ms(time.Since(start)))
			e.contract[r.item.key] = contract
		}
	}
	e.measured++
	sameFrames := r.declared.FramesSHA256 != "" && r.declared.FramesSHA256 == n.FramesSHA256
	return check.EncodePSNR(n.Raw, frames, c.Entry.Workload != spec.TextToVideo, contract, sameFrames)
}

func (e *encodeCheck) skip(why string) {
	if !slices.Contains(e.skipped, why) {
		e.skipped = append(e.skipped, why)
	}
}

func (e *encodeCheck) summary() string {
	msg := fmt.Sprintf("encode-psnr measured on %d", e.measured)
	if len(e.skipped) > 0 {
		msg += "; encode-psnr not measured or in part: " + strings.Join(e.skipped, "; ")
	}
	return msg
}
