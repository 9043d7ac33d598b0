package check_test

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Every check is shown passing on a good input and failing, under its own name, on an input
// broken in exactly the way it exists to catch.

func failsWith(t *testing.T, err error, name string) {
	t.Helper()
	var f *check.Failure
	require.True(t, errors.As(err, &f), "want a check failure, got %v", err)
	assert.Equal(t, name, f.Check)
	assert.Contains(t, err.Error(), "check "+name+":")
	checktest.Failed(t, err, name)
}

// clip encodes a real MP4 with ffmpeg so the container checks see what a server would send.
func clip(t *testing.T, frames, w, h, fps int) string {
	path := filepath.Join(t.TempDir(), "c.mp4")
	out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=%d", w, h, fps),
		"-frames:v", fmt.Sprint(frames), "-c:v", "libx264", "-pix_fmt", "yuv420p", "-video_track_timescale", fmt.Sprint(fps*1000), path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return path
}

func TestClipChecks(t *testing.T) {
	want := spec.Settings{Size: spec.Size{W: 160, H: 96}, NumFrames: 17, FPS: 16}
	good, err := media.ReadMP4File(clip(t, 17, 160, 96, 16))
	require.NoError(t, err)
	require.NoError(t, check.Clip(good, want))

	for name, broken := range map[string]string{
		"frame-count": clip(t, 13, 160, 96, 16),
		"size":        clip(t, 17, 128, 96, 16),
		"fps":         clip(t, 17, 160, 96, 24),
	} {
		info, err := media.ReadMP4File(broken)
		require.NoError(t, err)
		failsWith(t, check.Clip(info, want), name)
	}
	lying := good
	lying.DurationS += 0.5 // container metadata that contradicts frames/fps
	failsWith(t, check.Clip(lying, want), "duration")

	p, err := media.FFprobe(context.Background(), clip(t, 17, 160, 96, 16))
	require.NoError(t, err)
	require.NoError(t, check.Decoded(p, want))
	p.Frames = 9 // a stream that decodes fewer frames than its index claims
	failsWith(t, check.Decoded(p, want), "decoded-frames")
}

func solid(w, h int, c color.RGBA) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = c.R, c.G, c.B, 255
	}
	return img
}

func pattern(w, h, shift int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, color.RGBA{uint8((x + shift) * 7), uint8(y * 5), uint8((x + y + shift) * 3), 255})
		}
	}
	return img
}

func TestMotionChecks(t *testing.T) {
	c := spec.VideoContract{MinMotion: 2, MinStdDev: 8}
	moving := []*image.RGBA{pattern(32, 32, 0), pattern(32, 32, 3), pattern(32, 32, 6)}
	m, err := check.Motion(moving, c)
	require.NoError(t, err)
	assert.Greater(t, m, 2.0)

	frozen := []*image.RGBA{pattern(32, 32, 0), pattern(32, 32, 0), pattern(32, 32, 0)}
	_, err = check.Motion(frozen, c)
	failsWith(t, err, "motion")

	blank := []*image.RGBA{pattern(32, 32, 0), solid(32, 32, color.RGBA{9, 9, 9, 255})}
	_, err = check.Motion(blank, c)
	failsWith(t, err, "blank-frame")
}

func TestEditChecks(t *testing.T) {
	c := spec.EditContract{MinChange: 4}
	ref := pattern(64, 64, 0)
	edited := solid(64, 64, color.RGBA{200, 10, 10, 255})
	_, err := check.Edit(edited, ref, spec.Size{W: 64, H: 64}, c)
	require.NoError(t, err)

	_, err = check.Edit(ref, ref, spec.Size{W: 64, H: 64}, c)
	failsWith(t, err, "edit-unchanged")
	_, err = check.Edit(edited, ref, spec.Size{W: 32, H: 32}, c)
	failsWith(t, err, "edit-size")
}

func TestIdentityChecks(t *testing.T) {
	frames := []string{"a", "b"}
	require.NoError(t, check.Identity("x", "x", frames, frames))
	failsWith(t, check.Identity("x", "y", frames, frames), "artifact-sha256")
	failsWith(t, check.Identity("x", "x", frames, []string{"a", "c"}), "frame-digests")
	failsWith(t, check.Identity("x", "x", frames, []string{"a"}), "frame-digests")
	require.NoError(t, check.Digest("artifact-digest", "d", "d"))
	failsWith(t, check.Digest("artifact-digest", "d", "e"), "artifact-digest")
}

func TestInfluenceProbe(t *testing.T) {
	refA, refB := pattern(48, 48, 0), pattern(48, 48, 20)
	// A faithful edit: each output is its own reference, slightly tinted.
	tint := func(img *image.RGBA) *image.RGBA {
		out := image.NewRGBA(img.Rect)
		copy(out.Pix, img.Pix)
		for i := 0; i < len(out.Pix); i += 4 {
			out.Pix[i+2] = uint8(min(255, int(out.Pix[i+2])+30))
		}
		return out
	}
	gap, err := check.Influence(tint(refA), tint(refB), refA, refB)
	require.NoError(t, err)
	assert.Empty(t, gap)

	// Ignores the reference: the same output for both.
	same := pattern(48, 48, 5)
	gap, err = check.Influence(same, same, refA, refB)
	failsWith(t, err, "influence-changes-output")
	assert.Equal(t, spec.GapIgnoresReference, gap)

	// Outputs differ but follow the wrong reference (swapped).
	gap, err = check.Influence(tint(refB), tint(refA), refA, refB)
	failsWith(t, err, "influence-closer-to-own")
	assert.Equal(t, spec.GapIgnoresReference, gap)
}

func TestSizeMismatchChecks(t *testing.T) {
	want := spec.Settings{Size: spec.Size{W: 160, H: 96}, NumFrames: 17, FPS: 16}
	p, err := media.FFprobe(context.Background(), clip(t, 17, 128, 96, 16))
	require.NoError(t, err)
	failsWith(t, check.Decoded(p, want), "decoded-size")

	_, err = check.Motion([]*image.RGBA{pattern(32, 32, 0), pattern(16, 32, 3)}, spec.VideoContract{MinStdDev: 1})
	failsWith(t, err, "frame-size")

	_, err = check.Influence(pattern(48, 48, 0), pattern(32, 48, 0), pattern(48, 48, 0), pattern(48, 48, 20))
	failsWith(t, err, "influence-size")
}

func TestReferenceOutputChecks(t *testing.T) {
	c := spec.ReferenceOutputs{MinSSIM: 0.85}
	ref := []*image.RGBA{pattern(64, 48, 0), pattern(64, 48, 3)}
	s, err := check.ReferenceOutput([]*image.RGBA{pattern(64, 48, 0), pattern(64, 48, 3)}, ref, c)
	require.NoError(t, err)
	assert.InDelta(t, 1.0, s, 1e-9)

	// Another picture at the same size and frame count.
	_, err = check.ReferenceOutput([]*image.RGBA{pattern(64, 48, 17), pattern(64, 48, 29)}, ref, c)
	failsWith(t, err, "reference-output")
	_, err = check.ReferenceOutput(ref[:1], ref, c)
	failsWith(t, err, "reference-frames")
	_, err = check.ReferenceOutput(nil, nil, c)
	failsWith(t, err, "reference-frames")
	_, err = check.ReferenceOutput([]*image.RGBA{pattern(48, 48, 0), pattern(48, 48, 3)}, ref, c)
	failsWith(t, err, "reference-size")
}

func TestBundleRevisionChecks(t *testing.T) {
	full := "6f3ccc0b56e431dc6a0c2b2039706d7d26f22cb9"
	require.NoError(t, check.Revision(full, full, "x"))
	require.NoError(t, check.Revision("6f3ccc0b", full, "x"), "a short row revision is a prefix of the bundle's commit")
	other := "921dbaf3" + full[8:]
	err := check.Revision(full, other, "mediaqual-revision.txt")
	failsWith(t, err, "bundle-revision")
	assert.ErrorContains(t, err, full)
	assert.ErrorContains(t, err, other)
	failsWith(t, check.Revision("6f3ccc0b", other, "x"), "bundle-revision")
	failsWith(t, check.Revision("6f3", full, "x"), "bundle-revision") // too short to identify anything
	failsWith(t, check.Revision(full, "", ""), "bundle-revision")

	require.NoError(t, check.BundleDigest("a03add7530f455d6ffff", "a03add7530f455d6", "reports/published/x"))
	failsWith(t, check.BundleDigest("b03add7530f455d6ffff", "a03add7530f455d6", "reports/published/x"), "bundle-digest")
	failsWith(t, check.BundleDigest("b03add7530f455d6ffff", "", "reports/published/x"), "bundle-digest")
}
