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

// GoneAfterDelete is the check "delete": what GET answered for a deleted job, or for its
// content (what), must be the contract's 404. Any other error (a 500, a dropped connection) is
// not evidence it is gone.
func GoneAfterDelete(what string, err error) error {
	var apiErr *client.APIError
	switch {
	case err == nil:
		return fail("delete", "%s still answers after delete", what)
	case !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound:
		return fail("delete", "GET %s after delete: want 404, got %v", what, err)
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

// MinClipPSNR is check "encode-psnr"'s floor for a clip, compared in ClipBox-pixel box means.
// H.264 at the contract's settings (x264 ultrafast, CRF 18, yuv420p) keeps a picture's coarse
// content even where it cannot keep its pixels: i.i.d. uniform noise, the worst case and what
// random weights come near, is far under it pixel by pixel and over it in 4x4 boxes; broken
// encodings (swapped colour channels, fault swaps-channels) stay under it in boxes too. The
// figures: docs/CALIBRATION.md, which TestEncodeCalibrationThroughX264 measures and holds.
const MinClipPSNR = 28.0

// ClipBox is the side of the boxes whose means a clip is compared in (edge boxes are smaller).
const ClipBox = 4

// MinCoarsePSNR is the floor in CoarseBox box means, where even noise is kept: a clip whose
// levels were squeezed (full range written as limited, fault limited-range) is off by the same
// levels at every scale, under it on ref-t2v where an honest encode and one of uniform noise
// are over it (docs/CALIBRATION.md).
const MinCoarsePSNR = 35.0

// CoarseBox is the side of the boxes MinCoarsePSNR is measured in.
const CoarseBox = 8

// MinContractPSNR is the floor, pixel by pixel, of a clip against the suite's own encode of its
// raw frames with the contract's settings (media.EncodeContract), for a server whose contract
// fixes its encoder (mediaserve's): one x264 on one machine gives the very frames (no
// difference at all), while a clip downscaled 2x or 4x before encoding (fault downscaled) is
// under it, although its box means pass the floors above (docs/CALIBRATION.md).
const MinContractPSNR = 45.0

// EncodePSNR is the check "encode-psnr": a decoded artifact against the raw rgb24 frames it was
// encoded from, over the whole clip (one mean squared error). The native path and the server
// share the encoder, so identity cannot see it break the frames; this holds it to them: a
// lossless artifact (an edit's PNG) must decode to them exactly, pixel by pixel; a clip must
// be within MinClipPSNR of them in ClipBox box means and MinCoarsePSNR in CoarseBox box
// means and, where contract holds the suite's own encode of the raw frames with the contract's
// settings (nil where the server's encoder is its own), within MinContractPSNR of that pixel by
// pixel. It returns the PSNR in ClipBox box means (pixel by pixel for a lossless artifact),
// capped at 100 dB for a lossless match so that it stays a number. sameFrames says the server
// declared the native raw frames as the ones it encoded (its frames digest), so a failure is
// the encoding's; otherwise all the check can know is that these are not the native frames.
func EncodePSNR(rawPath string, decoded []*image.RGBA, lossless bool, contract []*image.RGBA, sameFrames bool) (float64, error) {
	cause := "not the native frames (other frames than the native path's for this input, or frames the encoding broke: the server does not declare which frames it encoded)"
	if sameFrames {
		cause = "the encoding broke the frames (the server declares the native raw frames as the ones it encoded)"
	}
	pix, err := os.ReadFile(rawPath)
	if err != nil {
		return 0, fail("encode-psnr", "the native raw frames: %w", err)
	}
	w, h := decoded[0].Rect.Dx(), decoded[0].Rect.Dy()
	raw := spec.Video{W: w, H: h, N: len(decoded), Pix: pix}
	if err := raw.Check(); err != nil {
		return 0, fail("encode-psnr", "raw frames against the %d decoded: %w", len(decoded), err)
	}
	psnr := func(of func(i int) *image.RGBA, box int) float64 {
		want := make([]*image.RGBA, len(decoded))
		for i := range decoded {
			want[i] = of(i)
		}
		return ClipPSNR(decoded, want, box)
	}
	if lossless {
		if p := psnr(raw.RGBA, 1); p < 100 {
			return p, fail("encode-psnr", "%.2f dB against the raw frames: a lossless artifact must decode to them exactly", p)
		}
		return 100, nil
	}
	box := psnr(raw.RGBA, ClipBox)
	if box < MinClipPSNR {
		return box, fail("encode-psnr", "%.2f dB against the raw frames in %dx%d box means, under the floor of %g dB: %s", box, ClipBox, ClipBox, MinClipPSNR, cause)
	}
	if p := psnr(raw.RGBA, CoarseBox); p < MinCoarsePSNR {
		return box, fail("encode-psnr", "%.2f dB against the raw frames in %dx%d box means, under the floor of %g dB: the picture's levels moved (a range or colour error): %s", p, CoarseBox, CoarseBox, MinCoarsePSNR, cause)
	}
	if contract != nil {
		if len(contract) != len(decoded) || contract[0].Rect != decoded[0].Rect {
			return box, fail("encode-psnr", "the contract's encode of the raw frames has %d frames of %v, the artifact %d of %v", len(contract), contract[0].Rect, len(decoded), decoded[0].Rect)
		}
		if p := psnr(func(i int) *image.RGBA { return contract[i] }, 1); p < MinContractPSNR {
			return box, fail("encode-psnr", "%.2f dB, pixel by pixel, from the contract's encode of the raw frames (x264 ultrafast CRF 18), under the floor of %g dB: the encoder lost detail it keeps (a downscale?)", p, MinContractPSNR)
		}
	}
	return box, nil
}

// FramePSNR is the check "frame-psnr": identity for a server whose encoder is its own, where
// equal decoded frames are not to be expected. The artifact's decoded frames against the native
// raw rgb24 frames, one by one: the same count and size, and every frame within MinClipPSNR in
// ClipBox box means and MinCoarsePSNR in CoarseBox box means. Frame by frame, so a frame dropped,
// repeated or broken in a slow clip cannot average out over the others as it can in
// encode-psnr's one figure for the clip.
func FramePSNR(rawPath string, w, h int, decoded []*image.RGBA) error {
	pix, err := os.ReadFile(rawPath)
	if err != nil {
		return fail("frame-psnr", "the native raw frames: %w", err)
	}
	raw := spec.Video{W: w, H: h, N: len(pix) / max(1, 3*w*h), Pix: pix}
	if err := raw.Check(); err != nil {
		return fail("frame-psnr", "the native raw frames: %w", err)
	}
	if len(decoded) != raw.N {
		return fail("frame-psnr", "%d decoded frames, %d native", len(decoded), raw.N)
	}
	for i, f := range decoded {
		if f.Rect.Dx() != w || f.Rect.Dy() != h {
			return fail("frame-psnr", "frame %d is %dx%d, the native frames %dx%d", i, f.Rect.Dx(), f.Rect.Dy(), w, h)
		}
		for _, floor := range []struct {
			box int
			min float64
		}{{ClipBox, MinClipPSNR}, {CoarseBox, MinCoarsePSNR}} {
			mse := boxMSE(f, raw.RGBA(i), floor.box)
			if mse == 0 {
				continue
			}
			if p := 10 * math.Log10(255*255/mse); p < floor.min {
				return fail("frame-psnr", "frame %d is %.2f dB from the native frame in %dx%d box means, under the floor of %g dB", i, p, floor.box, floor.box, floor.min)
			}
		}
	}
	return nil
}

// ClipPSNR is the PSNR of clip a against clip b (the same count and size) over the whole clip,
// one mean squared error of their R, G and B means over box x box boxes (box 1: pixel by
// pixel), capped at 100 dB for equal clips so that it stays a number.
func ClipPSNR(a, b []*image.RGBA, box int) float64 {
	var mse float64
	for i, f := range a {
		mse += boxMSE(f, b[i], box) / float64(len(a))
	}
	if mse == 0 {
		return 100
	}
	return min(100, 10*math.Log10(255*255/mse))
}

// boxMSE is the mean squared difference of a and b's R, G and B means over k x k boxes (k 1:
// pixel by pixel). a and b have the same size.
func boxMSE(a, b *image.RGBA, k int) float64 {
	w, h := a.Rect.Dx(), a.Rect.Dy()
	var sum float64
	boxes := 0
	for y0 := 0; y0 < h; y0 += k {
		for x0 := 0; x0 < w; x0 += k {
			var d [3]float64
			n := 0
			for y := y0; y < min(y0+k, h); y++ {
				pa, pb := a.Pix[y*a.Stride:], b.Pix[y*b.Stride:]
				for x := x0; x < min(x0+k, w); x++ {
					for c := range 3 {
						d[c] += float64(pa[4*x+c]) - float64(pb[4*x+c])
					}
					n++
				}
			}
			for c := range 3 {
				m := d[c] / float64(n)
				sum += m * m
			}
			boxes++
		}
	}
	return sum / float64(3*boxes)
}
