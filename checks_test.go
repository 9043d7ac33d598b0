package mediaqual_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"mediaqual/harness/aiperf"
	"mediaqual/harness/client"
	"mediaqual/internal/stages"
	"mediaqual/models"
	"mediaqual/models/spec"
	"mediaqual/server"
)

// The suite's own checks (those outside harness/check) shown failing on broken inputs.

func TestReconcileCatchesUnbackedDeclarations(t *testing.T) {
	e, err := models.Lookup("ref-edit")
	require.NoError(t, err)
	good := client.Model{ID: "ref-edit", Capabilities: []string{"image_edit"}, Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}
	require.NoError(t, reconcile([]client.Model{good}, e))

	for name, tc := range map[string]struct {
		served []client.Model
		msg    string
	}{
		"unknown model":       {[]client.Model{good, {ID: "mystery", Capabilities: []string{"image_edit"}}}, "not in the inventory"},
		"claimed capability":  {[]client.Model{{ID: "ref-edit", Capabilities: []string{"image_edit", "text_to_video"}, Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}}, "declares text_to_video"},
		"other revision":      {[]client.Model{{ID: "ref-edit", Capabilities: []string{"image_edit"}, Revision: "v0", Precision: e.Precision, Profile: e.Profile}}, "serves revision"},
		"not served":          {nil, "is not served"},
		"capability withheld": {[]client.Model{{ID: "ref-edit", Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}}, "does not declare image_edit"},
	} {
		err := reconcile(tc.served, e)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "check reconcile:", name)
		assert.Contains(t, err.Error(), tc.msg, name)
	}
}

func TestGPUPreCheckSaysWhatToSet(t *testing.T) {
	e, err := models.Lookup("Wan-AI/Wan2.1-T2V-1.3B")
	require.NoError(t, err)
	t.Setenv("MEDIAQUAL_BUNDLES", "")
	t.Setenv("MEDIAQUAL_GPUS", "0")
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MEDIAQUAL_BUNDLES")

	root := t.TempDir()
	t.Setenv("MEDIAQUAL_BUNDLES", root)
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(root, e.Bundle))

	require.NoError(t, os.MkdirAll(filepath.Join(root, e.Bundle), 0o755))
	t.Setenv("MEDIAQUAL_GPUS", "")
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MEDIAQUAL_GPUS")
}

// gatedTask holds every job until its gate closes, reporting progress as it waits.
type gatedTask struct{ gate chan struct{} }

func (g gatedTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	req.Progress(1, 4)
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return spec.Output{}, ctx.Err()
}

func TestProgressLinesDuringLongRuns(t *testing.T) {
	e, err := models.Lookup("ref-t2v")
	require.NoError(t, err)
	cp := e.Checkpoint
	gate := make(chan struct{})
	srv, err := server.New(server.Config{Models: []server.Model{{Checkpoint: cp, Task: gatedTask{gate}}}, ArtifactDir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, srv.Load(context.Background()))
	hs := httptest.NewServer(srv.Handler())
	defer func() { close(gate); hs.Close(); srv.Close() }()
	api := &client.Client{BaseURL: hs.URL}
	v, err := api.CreateVideo(context.Background(), map[string]string{"model": cp.ID, "prompt": "slow"}, "")
	require.NoError(t, err)

	var mu sync.Mutex
	var lines []string
	q := &qualification{entry: e, ctx: context.Background(), server: &servedModel{api: api}}
	stop := q.showProgress(func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(f, a...))
	}, 20*time.Millisecond)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(lines) >= 2 }, 5*time.Second, 10*time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "progress: "+v.ID+" in_progress 25%", lines[0])
}

func TestAIPerfRunChecksCatchBrokenRuns(t *testing.T) {
	byPrompt := map[string]workItem{"a cat": {key: "prompt-0"}, "a dog": {key: "prompt-1"}}
	req := func(prompt string, warmup bool) aiperf.Request {
		return aiperf.Request{XRequestID: "r-" + prompt, Warmup: warmup, Outcome: aiperf.Completed,
			Raw: aiperf.RawRecord{Payload: map[string]any{"prompt": prompt}}}
	}
	good := []aiperf.Request{req("a cat", true), req("a cat", false), req("a dog", false)}
	require.NoError(t, checkRun(good, nil, 1, 2, byPrompt))

	for name, c := range map[string]struct {
		reqs    []aiperf.Request
		execErr error
		want    string
	}{
		"non-zero exit":   {good, fmt.Errorf("exit status 1"), "check aiperf-exit: every request is accounted for, yet exit status 1"},
		"no warmup":       {good[1:], nil, "check aiperf-counts: 0 warmup and 2 measured records, want 1 and 2"},
		"one short":       {good[:2], nil, "check aiperf-counts: 1 warmup and 1 measured records, want 1 and 2"},
		"two warmups":     {append([]aiperf.Request{req("a dog", true)}, good...), nil, "check aiperf-counts: 2 warmup"},
		"unpinned prompt": {[]aiperf.Request{req("a cat", true), req("a cat", false), req("a cow", false)}, nil, `check aiperf-inputs: request r-a cow sent prompt "a cow"`},
	} {
		err := checkRun(c.reqs, c.execErr, 1, 2, byPrompt)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
	}

	x := aiperf.Exports{HasSummary: true}
	x.Summary.Version = aiperf.Version
	require.NoError(t, checkVersion(x))
	x.Summary.Version = "0.12.0"
	assert.ErrorContains(t, checkVersion(x), "check aiperf-version: the run reports 0.12.0, pinned "+aiperf.Version)
}

func TestGoldenCatchesChangedOutput(t *testing.T) {
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	goldens := map[string]string{"ref-t2v/prompt-0": a}
	require.NoError(t, checkGolden(goldens, false, "ref-t2v/prompt-0", a, "goldens.json"))
	assert.ErrorContains(t, checkGolden(goldens, false, "ref-t2v/prompt-0", b, "goldens.json"), "check golden: ref-t2v/prompt-0 frames bbbbbbbbbbbb, golden aaaaaaaaaaaa")
	assert.ErrorContains(t, checkGolden(goldens, false, "ref-t2v/prompt-1", a, "goldens.json"), "check golden: no golden for ref-t2v/prompt-1 in goldens.json")
	require.NoError(t, checkGolden(goldens, true, "ref-t2v/prompt-1", b, "goldens.json"), "update records")
	assert.Equal(t, b, goldens["ref-t2v/prompt-1"])
}

func TestInfluenceVerdict(t *testing.T) {
	gapErr := fmt.Errorf("check influence-changes-output: outputs differ by 0.0")
	_, err := influenceVerdict("", nil, "")
	require.NoError(t, err, "no gap, none expected")
	_, err = influenceVerdict("ignores-reference", gapErr, "")
	assert.Equal(t, gapErr, err, "an unexpected gap fails the case")
	msg, err := influenceVerdict("ignores-reference", gapErr, "ignores-reference")
	require.NoError(t, err, "the negative control's expected gap")
	assert.Contains(t, msg, "as expected")
	_, err = influenceVerdict("", nil, "ignores-reference")
	assert.ErrorContains(t, err, `check influence-expected-gap: the probe did not find the expected gap "ignores-reference"`)
	_, err = influenceVerdict("other-gap", gapErr, "ignores-reference")
	assert.Equal(t, gapErr, err, "a different gap from the expected one fails")
}

func TestEditResponseMustCarryOneImage(t *testing.T) {
	rec := func(body string) aiperf.RawRecord {
		return aiperf.RawRecord{Responses: []aiperf.RawResponse{{Text: body}}}
	}
	img, err := editImage(rec(`{"data":[{"b64_json":"` + base64.StdEncoding.EncodeToString([]byte("png")) + `"}]}`))
	require.NoError(t, err)
	assert.Equal(t, []byte("png"), img)
	for body, want := range map[string]string{
		`{"data":[]}`: "check edit-response: want one image in data, got 0",
		`{"data":[{"b64_json":"eA=="},{"b64_json":"eA=="}]}`: "check edit-response: want one image in data, got 2",
		`{"data":[{"b64_json":"not base64!"}]}`:              "check edit-response: data[0].b64_json",
		`{"data":[{"url":"http://x/y.png"}]}`:                "check edit-response: data[0].b64_json",
		`not json`:                                           "check edit-response: want one image in data, got 0",
	} {
		_, err := editImage(rec(body))
		assert.ErrorContains(t, err, want, body)
	}
}

func TestReferenceOutputsAreCompared(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	picture := func(shift int) *image.RGBA {
		img := image.NewRGBA(image.Rect(0, 0, 64, 48))
		for y := range 48 {
			for x := range 64 {
				img.SetRGBA(x, y, color.RGBA{uint8((x + shift) * 7), uint8(y*5 + shift*11), uint8((x + y + shift) * 3), 255})
			}
		}
		return img
	}
	writePNG := func(path string, shift int) {
		var b bytes.Buffer
		require.NoError(t, png.Encode(&b, picture(shift)))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
	}
	// The native outputs: cat-sepia is picture 0, dog-grey picture 1.
	got := map[string][]*image.RGBA{"cat-sepia": {picture(0)}, "dog-grey": {picture(1)}}
	run := func() (*referenceOutputs, []error) {
		r := &referenceOutputs{dir: filepath.Join(dir, spec.ReferenceOutputsDir), c: spec.ReferenceOutputs{MinSSIM: 0.85}, lowest: 1}
		var errs []error
		for _, key := range []string{"cat-sepia", "dog-grey"} {
			if err := r.compare(ctx, key, got[key], spec.ImageEdit); err != nil {
				errs = append(errs, err)
			}
		}
		return r, errs
	}
	refs := filepath.Join(dir, spec.ReferenceOutputsDir)

	r, errs := run()
	require.Empty(t, errs)
	assert.Contains(t, r.summary(), "carries no reference outputs", "absent: said, not passed off as compared")

	writePNG(filepath.Join(refs, "cat-sepia.png"), 0)
	_, errs = run()
	require.Len(t, errs, 1)
	assert.ErrorContains(t, errs[0], "check reference-output: dog-grey:", "a partial set names the missing input")

	writePNG(filepath.Join(refs, "dog-grey.png"), 1)
	r, errs = run()
	require.Empty(t, errs)
	assert.Equal(t, "2 outputs match the bundle's reference outputs (lowest mean SSIM 1.000, at least 0.850)", r.summary())

	writePNG(filepath.Join(refs, "dog-grey.png"), 23) // another output for the same input
	r, errs = run()
	require.Len(t, errs, 1)
	assert.ErrorContains(t, errs[0], "check reference-output: mean SSIM")
	assert.InDelta(t, 1.0, r.ssim["cat-sepia"], 1e-9, "the SSIM measured is reported, pass or fail")
	assert.Less(t, r.ssim["dog-grey"], 0.85)
	require.NoError(t, os.RemoveAll(refs))

	// Written on request from native outputs, then held to from the next run on.
	native := map[string]nativeResult{}
	for key, shift := range map[string]int{"cat-sepia": 0, "dog-grey": 1} {
		p := filepath.Join(dir, "native", key+".png")
		writePNG(p, shift)
		native[key] = nativeResult{path: p}
	}
	w := &referenceOutputs{dir: refs}
	n, err := w.write(native, spec.ImageEdit)
	require.NoError(t, err)
	assert.Zero(t, n, "not asked")
	t.Setenv(envWriteReferenceOutputs, "1")
	n, err = w.write(native, spec.ImageEdit)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.NoError(t, w.compare(ctx, "dog-grey", got["cat-sepia"], spec.ImageEdit), "the writing run compares nothing")
	r, errs = run()
	assert.Empty(t, errs)
	assert.Equal(t, 2, r.compared, "the next run holds the outputs to them")
}

// fakeBundle writes a bundle directory for row e as `hf download --revision commit --local-dir`
// leaves it: a file and the client's metadata naming the commit. No weights: nothing may load.
func fakeBundle(t *testing.T, e spec.Entry, commit string) string {
	root := t.TempDir()
	dir := filepath.Join(root, e.Bundle)
	meta := filepath.Join(dir, ".cache", "huggingface", "download")
	require.NoError(t, os.MkdirAll(meta, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model_index.json"), []byte("{}"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(meta, "model_index.json.metadata"), []byte(commit+"\n\"etag\"\n1712656091.123\n"), 0o644))
	t.Setenv("MEDIAQUAL_BUNDLES", root)
	t.Setenv("MEDIAQUAL_GPUS", "0")
	return dir
}

func inventoryStage(t *testing.T, id string) (*qualification, string, error) {
	e, err := models.Lookup(id)
	require.NoError(t, err)
	row := newRow(e)
	q := &qualification{t: t, entry: e, row: &row, ctx: context.Background(), native: map[string]nativeResult{}}
	msg, err := q.inventory(t)
	return q, msg, err
}

// A bundle whose revision is not the row's fails the inventory stage, naming both, before
// anything loads: no native path, no server.
func TestInventoryFailsOnAnotherRevision(t *testing.T) {
	const other = "0123456789abcdef0123456789abcdef01234567"
	for _, id := range []string{"Qwen/Qwen-Image-Edit-2511", "Wan-AI/Wan2.2-TI2V-5B"} { // full and short revisions
		e, err := models.Lookup(id)
		require.NoError(t, err)
		fakeBundle(t, e, other)
		q, _, err := inventoryStage(t, id)
		require.Error(t, err, id)
		assert.Contains(t, err.Error(), "check bundle-revision:", id)
		assert.Contains(t, err.Error(), e.Revision, id)
		assert.Contains(t, err.Error(), other, id)
		assert.Nil(t, q.server, "nothing served")
		assert.Empty(t, q.native, "nothing run natively")

		// The row's own revision passes (a short one as the prefix of the full commit).
		full := e.Revision + other[len(e.Revision):]
		fakeBundle(t, e, full)
		_, msg, err := inventoryStage(t, id)
		require.NoError(t, err, id)
		assert.Contains(t, msg, "bundle revision "+full+" matches the row's "+e.Revision)
	}
	assert.Equal(t, "inventory", stagesFor(t, "Qwen/Qwen-Image-Edit-2511")[0], "the inventory stage runs first")
}

// A bundle that states no revision cannot stand for a row that pins one.
func TestInventoryFailsOnABundleWithoutRevision(t *testing.T) {
	e, err := models.Lookup("Qwen/Qwen-Image-Edit-2511")
	require.NoError(t, err)
	dir := fakeBundle(t, e, "x")
	require.NoError(t, os.RemoveAll(filepath.Join(dir, ".cache")))
	_, _, err = inventoryStage(t, e.ID)
	assert.ErrorContains(t, err, "check bundle-revision: the row pins revision "+e.Revision+", but the bundle states none")

	// An L0-random bundle is no revision's weights: not held to one, and capped.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "L0-RANDOM.txt"), nil, 0o644))
	q, msg, err := inventoryStage(t, e.ID)
	require.NoError(t, err)
	assert.Contains(t, msg, "L0-random bundle: no revision to check")
	q.row.Earn()
	assert.Equal(t, spec.Implemented, q.row.Earned)
}

// A row without a revision runs, but can earn no more than implemented, and says why.
func TestRowWithoutRevisionEarnsAtMostImplemented(t *testing.T) {
	e, err := models.Lookup("Wan-AI/Wan2.1-T2V-1.3B")
	require.NoError(t, err)
	require.Empty(t, e.Revision, "the seeds give Wan2.1 no revision")
	fakeBundle(t, e, "0123456789abcdef0123456789abcdef01234567")
	q, msg, err := inventoryStage(t, e.ID)
	require.NoError(t, err)
	assert.Contains(t, msg, "the row pins no revision, the bundle holds 0123456789abcdef0123456789abcdef01234567")
	q.row.Earn()
	assert.Equal(t, spec.Implemented, q.row.Earned)
	require.Len(t, q.row.Limits, 1)
	assert.Contains(t, q.row.Limits[0].Why, "nobody pinned these weights")
}

// The digest of a bundle is held to a published qualification of the same revision.
func TestBundleDigestComparedWithPublished(t *testing.T) {
	e, err := models.Lookup("Qwen/Qwen-Image-Edit-2511")
	require.NoError(t, err)
	row := newRow(e)
	q := &qualification{t: t, entry: e, row: &row, commit: e.Revision}
	msg, err := q.publishedDigest(strings.Repeat("ab", 32))
	require.NoError(t, err)
	assert.Contains(t, msg, "no published qualification of revision "+e.Revision, "the published Qwen run was L0-random: not a revision's weights")
	q.row.Profile = "L0-random"
	msg, err = q.publishedDigest("x")
	require.NoError(t, err)
	assert.Empty(t, msg)
}

func stagesFor(t *testing.T, id string) []string {
	e, err := models.Lookup(id)
	require.NoError(t, err)
	return stages.For(e)
}

// Cleanup's delete check accepts only the 404 the contract promises for a deleted job.
func TestDeletedJobMustAnswer404(t *testing.T) {
	require.NoError(t, goneAfterDelete("video_1", &client.APIError{Status: 404}))
	for name, err := range map[string]error{
		"still there":  nil,
		"server error": &client.APIError{Status: 500},
		"conflict":     &client.APIError{Status: 409},
		"no answer":    fmt.Errorf("dial tcp: connection refused"),
	} {
		assert.ErrorContains(t, goneAfterDelete("video_1", err), "check delete:", name)
	}
}

// A quick run asks for its counts by environment; a bad value is refused, not defaulted.
func TestRequestPlan(t *testing.T) {
	t.Setenv("MEDIAQUAL_WARMUP_REQUESTS", "")
	t.Setenv("MEDIAQUAL_MEASURED_REQUESTS", "")
	w, m, err := requestPlan(4)
	require.NoError(t, err)
	assert.Equal(t, [2]int{1, 4}, [2]int{w, m}, "pinned: 1 + one per input")
	t.Setenv("MEDIAQUAL_WARMUP_REQUESTS", "0")
	t.Setenv("MEDIAQUAL_MEASURED_REQUESTS", "1")
	w, m, err = requestPlan(4)
	require.NoError(t, err)
	assert.Equal(t, [2]int{0, 1}, [2]int{w, m})
	t.Setenv("MEDIAQUAL_MEASURED_REQUESTS", "0")
	_, _, err = requestPlan(4)
	assert.ErrorContains(t, err, "MEDIAQUAL_MEASURED_REQUESTS")
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

	p, err := encodePSNR(raw, frames)
	require.NoError(t, err)
	assert.Equal(t, 100.0, p)

	changed := image.NewRGBA(frames[1].Rect)
	copy(changed.Pix, frames[1].Pix)
	changed.Pix[0] += 20
	p, err = encodePSNR(raw, []*image.RGBA{frames[0], changed})
	require.NoError(t, err)
	assert.Less(t, p, 40.0)
	assert.Greater(t, p, 20.0)

	_, err = encodePSNR(raw, frames[:1])
	assert.ErrorContains(t, err, "check encode-psnr: raw frames against the 1 decoded")
	_, err = encodePSNR(filepath.Join(t.TempDir(), "missing.rgb"), frames)
	assert.ErrorContains(t, err, "check encode-psnr: the native raw frames")
}
