package check

import (
	"encoding/base64"
	"errors"
	"image"
	"math"
	"net/http"
	"os"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/models/spec"
)

// The checks of a run's mechanics: goldens, the AIPerf run, responses, delete and the encoder.

// Golden is the check "golden": an output's frame digest against its golden, or, when update,
// recorded as the golden.
func Golden(goldens map[string]string, update bool, key, frames, file string) error {
	switch want, ok := goldens[key]; {
	case update:
		goldens[key] = frames
	case !ok:
		return fail("golden", "no golden for %s in %s; record with MEDIAQUAL_UPDATE_GOLDENS=1", key, file)
	case want != frames:
		return fail("golden", "%s frames %s, golden %s (refresh only with MEDIAQUAL_UPDATE_GOLDENS=1 after a deliberate change)", key, frames[:12], want[:12])
	}
	return nil
}

// AIPerfExports is the check "aiperf-exports": AIPerf left the exports its run is read from
// (readErr is the reading's failure, execErr AIPerf's exit). AIPerf 0.13 can exit 0 having
// sent nothing and written none (its IPC sockets failed to bind, for one).
func AIPerfExports(readErr, execErr error) error {
	switch {
	case readErr == nil:
		return nil
	case execErr == nil:
		return fail("aiperf-exports", "AIPerf exited 0 but left no exports to read: %w", readErr)
	}
	return fail("aiperf-exports", "AIPerf failed (%w) and left no exports to read: %w", execErr, readErr)
}

// AIPerfVersion is the check "aiperf-version": the run's own report of its version against
// the pin (an aborted run has none).
func AIPerfVersion(x aiperf.Exports) error {
	if x.HasSummary && x.Summary.Version != aiperf.Version {
		return fail("aiperf-version", "the run reports %s, pinned %s", x.Summary.Version, aiperf.Version)
	}
	return nil
}

// AIPerfRun holds a fully accounted AIPerf run to its plan (checks "aiperf-exit",
// "aiperf-counts", "aiperf-inputs"): a clean exit, the planned warmup and measured requests,
// and nothing sent but pinned prompts.
func AIPerfRun(reqs []aiperf.Request, execErr error, warmup, measured int, pinned func(prompt string) bool) error {
	if execErr != nil {
		return fail("aiperf-exit", "every request is accounted for, yet %w", execErr)
	}
	w, m := 0, 0
	for _, r := range reqs {
		if r.Warmup {
			w++
		} else {
			m++
		}
	}
	if w != warmup || m != measured {
		return fail("aiperf-counts", "%d warmup and %d measured records, want %d and %d", w, m, warmup, measured)
	}
	for _, r := range reqs {
		prompt, _ := r.Raw.Payload["prompt"].(string)
		if !pinned(prompt) {
			return fail("aiperf-inputs", "request %s sent prompt %q, which is not a pinned input", r.XRequestID, prompt)
		}
	}
	return nil
}

// EditResponse is the check "edit-response": the one edited PNG AIPerf received, from the
// response body it kept.
func EditResponse(raw aiperf.RawRecord) ([]byte, error) {
	data, _ := raw.Body(0)["data"].([]any)
	if len(data) != 1 {
		return nil, fail("edit-response", "want one image in data, got %d", len(data))
	}
	b64, _ := data[0].(map[string]any)["b64_json"].(string)
	img, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(img) == 0 {
		return nil, fail("edit-response", "data[0].b64_json: %v", err)
	}
	return img, nil
}

// GoneAfterDelete is the check "delete": what GET answered for a deleted job must be the
// contract's 404. Any other error (a 500, a dropped connection) is not evidence it is gone.
func GoneAfterDelete(id string, err error) error {
	var apiErr *client.APIError
	switch {
	case err == nil:
		return fail("delete", "%s still answers after delete", id)
	case !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound:
		return fail("delete", "GET %s after delete: want 404, got %v", id, err)
	}
	return nil
}

// InfluenceVerdict reads the influence probe against the row (check "influence-expected-gap"):
// a gap fails unless the row is a negative control expecting exactly that gap, which fails
// if the probe finds none.
func InfluenceVerdict(gap string, err error, expect string) (string, error) {
	switch {
	case gap != "" && gap == expect:
		return "capability gap detected as expected for this negative control: " + err.Error(), nil
	case err != nil:
		return "", err
	case expect != "":
		return "", fail("influence-expected-gap", "the probe did not find the expected gap %q", expect)
	}
	return "outputs follow their references", nil
}

// MinClipPSNR is check "encode-psnr"'s floor for a clip. The encoder's settings (x264, CRF 18,
// yuv420p) gave 25.0 dB on the noise of the published L0-random Wan2.1 clips and 38.8-40.0 dB
// on ref-t2v's; a clip farther than 20 dB from its own frames was broken by its encoding
// (swapped colour channels, fault swaps-channels: 10.4-14.3 dB on ref-t2v).
const MinClipPSNR = 20.0

// EncodePSNR is the check "encode-psnr": the PSNR (dB, RGB) of a decoded artifact against the
// raw rgb24 frames it was encoded from, over the whole clip (one mean squared error), capped at
// 100 dB for a lossless match so that it stays a number. The native path and the server share
// the encoder, so identity cannot see it break the frames; this holds it to them: a lossless
// artifact (an edit's PNG) must decode to them exactly, a clip to within MinClipPSNR.
func EncodePSNR(rawPath string, decoded []*image.RGBA, lossless bool) (float64, error) {
	pix, err := os.ReadFile(rawPath)
	if err != nil {
		return 0, fail("encode-psnr", "the native raw frames: %w", err)
	}
	w, h := decoded[0].Rect.Dx(), decoded[0].Rect.Dy()
	raw := spec.Video{W: w, H: h, N: len(decoded), Pix: pix}
	if err := raw.Check(); err != nil {
		return 0, fail("encode-psnr", "raw frames against the %d decoded: %w", len(decoded), err)
	}
	var mse float64
	for i, f := range decoded {
		p, err := media.PSNR(f, raw.RGBA(i))
		if err != nil {
			return 0, fail("encode-psnr", "frame %d: %w", i, err)
		}
		if !math.IsInf(p, 1) {
			mse += 255 * 255 / math.Pow(10, p/10) / float64(len(decoded))
		}
	}
	psnr := 100.0
	if mse > 0 {
		psnr = min(100, 10*math.Log10(255*255/mse))
	}
	switch {
	case lossless && psnr < 100:
		return psnr, fail("encode-psnr", "%.2f dB against the raw frames: a lossless artifact must decode to them exactly", psnr)
	case psnr < MinClipPSNR:
		return psnr, fail("encode-psnr", "%.2f dB against the raw frames, under the floor of %g dB: the encoding broke the frames", psnr, MinClipPSNR)
	}
	return psnr, nil
}
