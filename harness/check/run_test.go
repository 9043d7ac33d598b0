package check

import (
	"encoding/base64"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/models/spec"
)

// failsWith asserts that err is a check failure naming name (read from the typed failure, as
// check_test.go's failsWith does from outside the package) and that its message says so; it
// says so in the output as checktest.Failed does (which this package's own tests cannot import:
// it imports the package).
func failsWith(t *testing.T, err error, name string) {
	t.Helper()
	require.Error(t, err, "want check %s to fail", name)
	if assert.Equal(t, []string{name}, Names(err), "%v", err) {
		t.Log("shown failing: " + name)
	}
	assert.Contains(t, err.Error(), "check "+name+":")
}

func TestAIPerfRunChecksCatchBrokenRuns(t *testing.T) {
	pinned := func(p string) bool { return p == "a cat" || p == "a dog" }
	req := func(prompt string, warmup bool) aiperf.Request {
		return aiperf.Request{XRequestID: "r-" + prompt, Warmup: warmup, Outcome: aiperf.Completed,
			Raw: aiperf.RawRecord{Payload: map[string]any{"prompt": prompt}}}
	}
	good := []aiperf.Request{req("a cat", true), req("a cat", false), req("a dog", false)}
	require.NoError(t, AIPerfRun(good, nil, 1, 2, pinned))

	for name, c := range map[string]struct {
		reqs    []aiperf.Request
		execErr error
		check   string
		want    string
	}{
		"non-zero exit":   {good, fmt.Errorf("exit status 1"), "aiperf-exit", "check aiperf-exit: every request is accounted for, yet exit status 1"},
		"no warmup":       {good[1:], nil, "aiperf-counts", "check aiperf-counts: 0 warmup and 2 measured records, want 1 and 2"},
		"one short":       {good[:2], nil, "aiperf-counts", "check aiperf-counts: 1 warmup and 1 measured records, want 1 and 2"},
		"two warmups":     {append([]aiperf.Request{req("a dog", true)}, good...), nil, "aiperf-counts", "check aiperf-counts: 2 warmup"},
		"unpinned prompt": {[]aiperf.Request{req("a cat", true), req("a cat", false), req("a cow", false)}, nil, "aiperf-inputs", `check aiperf-inputs: request r-a cow sent prompt "a cow"`},
	} {
		err := AIPerfRun(c.reqs, c.execErr, 1, 2, pinned)
		failsWith(t, err, c.check)
		assert.Contains(t, err.Error(), c.want, name)
	}

	require.NoError(t, AIPerfExports(nil, nil))
	missing := fmt.Errorf("open profile_export.jsonl: %w", os.ErrNotExist)
	failsWith(t, AIPerfExports(missing, nil), "aiperf-exports")
	assert.ErrorContains(t, AIPerfExports(missing, nil), "check aiperf-exports: AIPerf exited 0 but left no exports to read: open profile_export.jsonl")
	failsWith(t, AIPerfExports(missing, fmt.Errorf("exit status 1")), "aiperf-exports")
	assert.ErrorContains(t, AIPerfExports(missing, fmt.Errorf("exit status 1")), "AIPerf failed (exit status 1) and left no exports")

	x := aiperf.Exports{HasSummary: true}
	x.Summary.Version = aiperf.Version
	require.NoError(t, AIPerfVersion(x))
	x.Summary.Version = "0.12.0"
	failsWith(t, AIPerfVersion(x), "aiperf-version")
	assert.ErrorContains(t, AIPerfVersion(x), "check aiperf-version: the run reports 0.12.0, pinned "+aiperf.Version)
}

func TestGoldenCatchesChangedOutput(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	goldens := map[string]string{"ref-t2v/prompt-0": a}
	require.NoError(t, Golden(goldens, false, "ref-t2v/prompt-0", a, "goldens.json"))
	failsWith(t, Golden(goldens, false, "ref-t2v/prompt-0", b, "goldens.json"), "golden")
	failsWith(t, Golden(goldens, false, "ref-t2v/prompt-1", a, "goldens.json"), "golden")
	assert.ErrorContains(t, Golden(goldens, false, "ref-t2v/prompt-0", b, "goldens.json"), "check golden: ref-t2v/prompt-0 frames bbbbbbbbbbbb, golden aaaaaaaaaaaa")
	assert.ErrorContains(t, Golden(goldens, false, "ref-t2v/prompt-1", a, "goldens.json"), "check golden: no golden for ref-t2v/prompt-1 in goldens.json")
	require.NoError(t, Golden(goldens, true, "ref-t2v/prompt-1", b, "goldens.json"), "update records")
	assert.Equal(t, b, goldens["ref-t2v/prompt-1"])
}

func TestInfluenceVerdict(t *testing.T) {
	gapErr := fmt.Errorf("check influence-changes-output: outputs differ by 0.0")
	_, err := InfluenceVerdict("", nil, "")
	require.NoError(t, err, "no gap, none expected")
	_, err = InfluenceVerdict("ignores-reference", gapErr, "")
	assert.Equal(t, gapErr, err, "an unexpected gap fails the case")
	msg, err := InfluenceVerdict("ignores-reference", gapErr, "ignores-reference")
	require.NoError(t, err, "the negative control's expected gap")
	assert.Contains(t, msg, "as expected")
	_, err = InfluenceVerdict("", nil, "ignores-reference")
	failsWith(t, err, "influence-expected-gap")
	assert.ErrorContains(t, err, `check influence-expected-gap: the probe did not find the expected gap "ignores-reference"`)
	_, err = InfluenceVerdict("other-gap", gapErr, "ignores-reference")
	assert.Equal(t, gapErr, err, "a different gap from the expected one fails")
}

func TestEditResponseMustCarryOneImage(t *testing.T) {
	rec := func(body string) aiperf.RawRecord {
		return aiperf.RawRecord{Responses: []aiperf.RawResponse{{Text: body}}}
	}
	img, err := EditResponse(rec(`{"data":[{"b64_json":"` + base64.StdEncoding.EncodeToString([]byte("png")) + `"}]}`))
	require.NoError(t, err)
	assert.Equal(t, []byte("png"), img)
	for body, want := range map[string]string{
		`{"data":[]}`: "check edit-response: want one image in data, got 0",
		`{"data":[{"b64_json":"eA=="},{"b64_json":"eA=="}]}`: "check edit-response: want one image in data, got 2",
		`{"data":[{"b64_json":"not base64!"}]}`:              "check edit-response: data[0].b64_json",
		`{"data":[{"url":"http://x/y.png"}]}`:                "check edit-response: data[0].b64_json",
		`not json`:                                           "check edit-response: want one image in data, got 0",
	} {
		_, err := EditResponse(rec(body))
		failsWith(t, err, "edit-response")
		assert.ErrorContains(t, err, want, body)
	}
}

// Cleanup's delete check accepts only the 404 the contract promises for a deleted job.
func TestDeletedJobMustAnswer404(t *testing.T) {
	require.NoError(t, GoneAfterDelete("video_1", &client.APIError{Status: 404}))
	for name, err := range map[string]error{
		"still there":  nil,
		"server error": &client.APIError{Status: 500},
		"conflict":     &client.APIError{Status: 409},
		"no answer":    fmt.Errorf("dial tcp: connection refused"),
	} {
		t.Run(name, func(t *testing.T) { failsWith(t, GoneAfterDelete("video_1", err), "delete") })
	}
}

// TestEncodePSNRMeasuresTheEncoder: equal frames are 100 dB (lossless), a changed pixel
// lowers it, and raw frames that are not the decoded clip's fail check encode-psnr.
func TestEncodePSNRMeasuresTheEncoder(t *testing.T) {
	frames := make([]*image.RGBA, 2)
	for i := range frames {
		frames[i] = image.NewRGBA(image.Rect(0, 0, 4, 2))
		for p := range frames[i].Pix {
			frames[i].Pix[p] = uint8(10*i + p)
			if p%4 == 3 {
				frames[i].Pix[p] = 255 // decoded frames are opaque
			}
		}
	}
	v, err := spec.PackRGBA(frames)
	require.NoError(t, err)
	raw := filepath.Join(t.TempDir(), "frames.rgb")
	require.NoError(t, os.WriteFile(raw, v.Pix, 0o644))

	p, err := EncodePSNR(raw, frames, true, nil, true)
	require.NoError(t, err)
	assert.Equal(t, 100.0, p)

	changed := image.NewRGBA(frames[1].Rect)
	copy(changed.Pix, frames[1].Pix)
	changed.Pix[0] += 20
	p, err = EncodePSNR(raw, []*image.RGBA{frames[0], changed}, false, nil, true)
	require.NoError(t, err)
	assert.Less(t, p, 100.0)
	assert.Greater(t, p, MinClipPSNR)
	// Lossy within the floor passes a clip; an image must be lossless.
	p, err = EncodePSNR(raw, []*image.RGBA{frames[0], changed}, true, nil, true)
	failsWith(t, err, "encode-psnr")
	assert.ErrorContains(t, err, "a lossless artifact must decode to them exactly")
	assert.Less(t, p, 40.0, "the figure is kept for the report")
	// Far off (every pixel 100 levels away): under the floor.
	far := image.NewRGBA(frames[1].Rect)
	for i := range far.Pix {
		far.Pix[i] = frames[1].Pix[i] + 100
	}
	_, err = EncodePSNR(raw, []*image.RGBA{frames[0], far}, false, nil, true)
	failsWith(t, err, "encode-psnr")
	assert.ErrorContains(t, err, "in 4x4 box means, under the floor of 28 dB")
	assert.ErrorContains(t, err, "the encoding broke the frames", "the server declared the native frames")
	// A server that does not declare which frames it encoded: all the check knows is that
	// these are not the native frames.
	_, err = EncodePSNR(raw, []*image.RGBA{frames[0], far}, false, nil, false)
	failsWith(t, err, "encode-psnr")
	assert.ErrorContains(t, err, "not the native frames")
	assert.NotContains(t, err.Error(), "the encoding broke the frames (the server declares")

	// A clip is compared in box means: pixel noise that averages out in each box (what H.264
	// leaves of noise it cannot keep) passes; pixel by pixel it is 40 levels off.
	gray := image.NewRGBA(image.Rect(0, 0, 4, 4))
	noisy := image.NewRGBA(gray.Rect)
	for i := range gray.Pix {
		gray.Pix[i], noisy.Pix[i] = 128, 128
		if i%4 != 3 {
			noisy.Pix[i] = []uint8{88, 168}[(i/4+i/16)%2] // a checkerboard of -40 and +40
		}
	}
	gv, err := spec.PackRGBA([]*image.RGBA{gray})
	require.NoError(t, err)
	grayRaw := filepath.Join(t.TempDir(), "gray.rgb")
	require.NoError(t, os.WriteFile(grayRaw, gv.Pix, 0o644))
	p, err = EncodePSNR(grayRaw, []*image.RGBA{noisy}, false, nil, true)
	require.NoError(t, err)
	assert.Equal(t, 100.0, p, "the noise cancels in the box")
	p, err = EncodePSNR(grayRaw, []*image.RGBA{noisy}, true, nil, true)
	failsWith(t, err, "encode-psnr")
	assert.InDelta(t, 16.1, p, 0.1, "pixel by pixel: 40 levels everywhere")

	_, err = EncodePSNR(raw, frames[:1], false, nil, true)
	failsWith(t, err, "encode-psnr")
	assert.ErrorContains(t, err, "check encode-psnr: raw frames against the 1 decoded")
	_, err = EncodePSNR(filepath.Join(t.TempDir(), "missing.rgb"), frames, false, nil, true)
	failsWith(t, err, "encode-psnr")
	assert.ErrorContains(t, err, "check encode-psnr: the native raw frames")
}

// FramePSNR holds every frame to the floors on its own: a clip whose one frame is far off
// fails, naming the frame, where encode-psnr's figure for the whole clip would average it out
// over the others; and a frame more or less fails.
func TestFramePSNRHoldsEveryFrame(t *testing.T) {
	frames := make([]*image.RGBA, 8)
	for i := range frames {
		frames[i] = image.NewRGBA(image.Rect(0, 0, 16, 16))
		for p := range frames[i].Pix {
			frames[i].Pix[p] = uint8(7*i + p%200)
			if p%4 == 3 {
				frames[i].Pix[p] = 255
			}
		}
	}
	v, err := spec.PackRGBA(frames)
	require.NoError(t, err)
	raw := filepath.Join(t.TempDir(), "frames.rgb")
	require.NoError(t, os.WriteFile(raw, v.Pix, 0o644))
	require.NoError(t, FramePSNR(raw, 16, 16, frames))

	off := make([]*image.RGBA, len(frames))
	copy(off, frames)
	off[5] = image.NewRGBA(frames[5].Rect)
	for i := range off[5].Pix {
		off[5].Pix[i] = frames[5].Pix[i] + 12 // 12 levels off: 26.5 dB; over the clip 35.6
	}
	err = FramePSNR(raw, 16, 16, off)
	failsWith(t, err, "frame-psnr")
	assert.ErrorContains(t, err, "frame 5 is")
	_, clipErr := EncodePSNR(raw, off, false, nil, true)
	assert.NoError(t, clipErr, "one frame in eight averages out over the clip")

	failsWith(t, FramePSNR(raw, 16, 16, frames[:7]), "frame-psnr")
}
