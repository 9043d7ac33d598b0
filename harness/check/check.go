// Package check holds the qualification's assertions on artifacts. Each failure is a *Failure
// naming its check, so a red test says which property broke. The thresholds come from the
// family's contract (models/spec); nothing here knows a model.
package check

import (
	"fmt"
	"image"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/internal/resize"
	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Failure is a failed check: the one way a check's failure is made (Fail), so that its name
// is read from the error (errors.As, Names), never from its text.
type Failure struct {
	Check  string // stable name, e.g. "frame-count", one of Registry
	Detail string
	err    error // what Detail wraps (%w), for errors.Is and errors.As
}

func (f *Failure) Error() string { return "check " + f.Check + ": " + f.Detail }

// Unwrap is what the detail was made with (%w), if anything.
func (f *Failure) Unwrap() []error {
	switch u := f.err.(type) {
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	}
	return nil
}

// Fail is a failed check, for the stages that find it; format may wrap an error with %w.
func Fail(check, format string, args ...any) *Failure { return fail(check, format, args...) }

func fail(check, format string, args ...any) *Failure {
	err := fmt.Errorf(format, args...)
	return &Failure{Check: check, Detail: err.Error(), err: err}
}

// Names lists the checks that failed in err, in order, each once: every Failure in its tree
// (errors.Join and %w followed).
func Names(err error) []string {
	var names []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if f, ok := e.(*Failure); ok && !slices.Contains(names, f.Check) {
			names = append(names, f.Check)
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return names
}

// Clip checks a clip's container against what was asked: exactly num_frames samples, the
// size, fps as an exact rational, and duration = frames/fps.
func Clip(info media.MP4Info, want spec.Settings) error {
	if info.Frames != want.NumFrames {
		return fail("frame-count", "container has %d frames, asked %d", info.Frames, want.NumFrames)
	}
	if info.Width != want.Size.W || info.Height != want.Size.H {
		return fail("size", "container is %dx%d, asked %s", info.Width, info.Height, want.Size)
	}
	if info.FPS == nil || info.FPS.Cmp(big.NewRat(int64(want.FPS), 1)) != 0 {
		return fail("fps", "container says %v fps, asked %d", info.FPS, want.FPS)
	}
	if d := float64(want.NumFrames) / float64(want.FPS); math.Abs(info.DurationS-d) > 1e-6 {
		return fail("duration", "container duration %.6f s, want frames/fps = %.6f s", info.DurationS, d)
	}
	return FrameTiming(info, want.FPS)
}

// FrameTiming is the check "frame-timing": every frame presented 1/fps after the one before it,
// read frame by frame from the container's timestamps (decode times plus composition offsets),
// within a tick or 0.5 % of the period, whichever is more. fps is an average over the clip: a
// writer that presents frames unevenly (each odd frame late, say) keeps the count, the rate and
// the duration the other checks read.
func FrameTiming(info media.MP4Info, fps int) error {
	if info.VideoTrack < 0 || fps <= 0 {
		return fail("frame-timing", "no video track, or no fps (%d) to time it by", fps)
	}
	t := info.Tracks[info.VideoTrack]
	deltas, err := t.PresentationDeltas()
	if err != nil {
		return fail("frame-timing", "%v", err)
	}
	period := float64(t.Timescale) / float64(fps)
	tol := max(1, 0.005*period)
	for i, d := range deltas {
		if math.Abs(float64(d)-period) > tol {
			return fail("frame-timing", "frame %d is presented %.4f s after frame %d, not 1/%d s (%.4f s; %d ticks of 1/%d s, %.1f wanted)",
				i+1, float64(d)/float64(t.Timescale), i, fps, 1/float64(fps), d, t.Timescale, period)
		}
	}
	return nil
}

// Decoded checks what a decoder really produced (ffprobe counting decoded frames) against the
// container: a corrupt stream decodes fewer frames than its index claims.
func Decoded(p media.Probe, want spec.Settings) error {
	if p.Frames != want.NumFrames {
		return fail("decoded-frames", "ffprobe decoded %d frames, asked %d", p.Frames, want.NumFrames)
	}
	if p.Width != want.Size.W || p.Height != want.Size.H {
		return fail("decoded-size", "ffprobe reports %dx%d, asked %s", p.Width, p.Height, want.Size)
	}
	return nil
}

// Motion checks the family's video contract on decoded frames: no blank frame, and a mean
// inter-frame change at or above the family's threshold (a frozen clip fails).
func Motion(frames []*image.RGBA, c spec.VideoContract) (float64, error) {
	for i, f := range frames {
		if media.IsBlank(f, c.MinStdDev) {
			return 0, fail("blank-frame", "frame %d: every channel's std dev is below %.2f %v", i, c.MinStdDev, media.ChannelStdDev(f))
		}
	}
	if len(frames) < 2 {
		return 0, nil
	}
	motion, err := media.Motion(frames)
	if err != nil {
		return 0, fail("frame-size", "%v", err)
	}
	var sum float64
	for _, m := range motion {
		sum += m
	}
	mean := sum / float64(len(frames)-1)
	if err := finite("motion", "mean inter-frame change", mean); err != nil {
		return mean, err
	}
	if mean < c.MinMotion {
		return mean, fail("motion", "mean inter-frame change %.3f, contract needs >= %.3f (frozen clip)", mean, c.MinMotion)
	}
	return mean, nil
}

// Edit checks an edited image: the asked size, and a real change from its reference (resized
// to the output when sizes differ).
func Edit(out, ref image.Image, want spec.Size, c spec.EditContract) (float64, error) {
	b := out.Bounds()
	if b.Dx() != want.W || b.Dy() != want.H {
		return 0, fail("edit-size", "image is %dx%d, asked %s", b.Dx(), b.Dy(), want)
	}
	d, err := media.MeanAbsDiff(out, resize.Image(ref, want.W, want.H))
	if err != nil {
		return 0, fail("edit-size", "%v", err)
	}
	if err := finite("edit-unchanged", "mean difference from the reference", d); err != nil {
		return d, err
	}
	if d < c.MinChange {
		return d, fail("edit-unchanged", "mean difference from the reference %.3f, contract needs >= %.3f", d, c.MinChange)
	}
	return d, nil
}

// Identity checks that the served artifact is the native one: the same file bytes and the same
// decoded frames.
func Identity(servedSHA, nativeSHA string, servedFrames, nativeFrames []string) error {
	if servedSHA != nativeSHA {
		return fail("artifact-sha256", "served %s, native %s", short(servedSHA), short(nativeSHA))
	}
	return FrameIdentity(servedFrames, nativeFrames)
}

// FrameIdentity checks that the served artifact decodes to the native frames (check
// "frame-digests"), where the native artifact's bytes are not the server's to match (the suite
// encoded them itself).
func FrameIdentity(servedFrames, nativeFrames []string) error {
	if len(servedFrames) != len(nativeFrames) {
		return fail("frame-digests", "served %d decoded frames, native %d", len(servedFrames), len(nativeFrames))
	}
	for i := range servedFrames {
		if servedFrames[i] != nativeFrames[i] {
			return fail("frame-digests", "decoded frame %d differs: served %s, native %s", i, short(servedFrames[i]), short(nativeFrames[i]))
		}
	}
	return nil
}

// ReferenceOutput compares a native output with the reference output for the same input: the
// same number of frames at the same size, and a mean luma SSIM of at least c.MinSSIM. It
// returns the mean SSIM.
func ReferenceOutput(got, want []*image.RGBA, c spec.ReferenceOutputs) (float64, error) {
	if len(got) != len(want) || len(got) == 0 {
		return 0, fail("reference-frames", "%d frames, the reference output has %d", len(got), len(want))
	}
	sum := 0.0
	for i := range got {
		s, err := media.SSIM(got[i], want[i])
		if err != nil {
			return 0, fail("reference-size", "frame %d: %v", i, err)
		}
		if err := finite("reference-output", fmt.Sprintf("frame %d SSIM", i), s); err != nil {
			return s, err
		}
		sum += s
	}
	mean := sum / float64(len(got))
	if mean < c.MinSSIM {
		return mean, fail("reference-output", "mean SSIM %.3f to the reference output, want at least %.3f", mean, c.MinSSIM)
	}
	return mean, nil
}

// Digest checks a downloaded artifact against the digest the server declared for it.
func Digest(check, got, declared string) error {
	if got != declared {
		return fail(check, "downloaded bytes hash to %s, the server declared %s", short(got), short(declared))
	}
	return nil
}

// Influence is the reference-influence probe for image_edit: the same instruction on two
// different references must give different outputs, each structurally closer (SSIM) to its own
// reference than to the other. When it is not, the model ignores its reference: the returned
// gap is spec.GapIgnoresReference and the error names the failed property.
func Influence(outA, outB, refA, refB image.Image) (gap string, err error) {
	w, h := outA.Bounds().Dx(), outA.Bounds().Dy()
	ra, rb := resize.Image(refA, w, h), resize.Image(refB, w, h)
	diff, err := media.MeanAbsDiff(outA, outB)
	if err != nil {
		return "", fail("influence-size", "%v", err)
	}
	if err := finite("influence-changes-output", "mean difference between the outputs", diff); err != nil {
		return "", err
	}
	if diff < 0.5 {
		return spec.GapIgnoresReference, fail("influence-changes-output", "outputs for two different references differ by %.3f on average: the reference has no effect", diff)
	}
	var s [4]float64 // output A to ref A, A to B, B to A, B to B
	for i, p := range [4][2]image.Image{{outA, ra}, {outA, rb}, {outB, ra}, {outB, rb}} {
		v, err := media.SSIM(p[0], p[1])
		if err != nil {
			return "", fail("influence-size", "%v", err)
		}
		if err := finite("influence-closer-to-own", "SSIM", v); err != nil {
			return "", err
		}
		s[i] = v
	}
	aa, ab, ba, bb := s[0], s[1], s[2], s[3]
	if aa <= ab || bb <= ba {
		return spec.GapIgnoresReference, fail("influence-closer-to-own",
			"output A SSIM to its reference %.3f vs the other %.3f; output B %.3f vs %.3f: outputs do not follow their references", aa, ab, bb, ba)
	}
	return "", nil
}

// finite fails the check that reads a metric when the metric is NaN or infinite: every
// comparison with NaN is false, so a threshold test alone would let it pass.
func finite(check, what string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fail(check, "%s is %v: the metric could not be computed (empty or mismatched images?)", what, v)
	}
	return nil
}

// Revision holds the commit a bundle states (bundle.Revision) to the row's revision: equal
// to a full commit, or starting with a short one. It runs before anything loads.
func Revision(row, commit, source string) error {
	if commit == "" {
		return fail("bundle-revision", "the row pins revision %s, but the bundle states none: download it with `hf download <repo> --revision %s --local-dir <bundle>` (the client records the commit under .cache/huggingface/), or write the full commit to %s", row, row, bundle.RevisionFile)
	}
	if !bundle.Matches(row, commit) {
		return fail("bundle-revision", "the row pins revision %s, the bundle holds %s (%s)", row, commit, source)
	}
	return nil
}

// BundleDigest holds a bundle's digest to the one a published qualification of the same
// revision recorded.
func BundleDigest(got, published, where string) error {
	if !strings.HasPrefix(got, published) || published == "" {
		return fail("bundle-digest", "bundle digest %s, but %s recorded %s for the same revision: these are not the weights qualified there", short(got), where, published)
	}
	return nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}
