package qualify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
)

// The rows below are the real inventory's (models.Lookup), read by the tests only: the
// package itself knows no row.

func lookup(t *testing.T, id string) spec.Entry {
	e, err := models.Lookup(id)
	require.NoError(t, err)
	return e
}

func TestGPUPreCheckSaysWhatToSet(t *testing.T) {
	e := lookup(t, "Wan-AI/Wan2.1-T2V-1.3B")
	t.Setenv("MEDIAQUAL_BUNDLES", "")
	cfg := Config{GPUs: "0"}
	assert.ErrorContains(t, GPUPreCheck(e, cfg), "MEDIAQUAL_BUNDLES")

	root := t.TempDir()
	t.Setenv("MEDIAQUAL_BUNDLES", root)
	assert.ErrorContains(t, GPUPreCheck(e, cfg), filepath.Join(root, e.Bundle))

	require.NoError(t, os.MkdirAll(filepath.Join(root, e.Bundle), 0o755))
	assert.ErrorContains(t, GPUPreCheck(e, Config{}), "MEDIAQUAL_GPUS")
	require.NoError(t, GPUPreCheck(e, Config{Target: Target{Endpoint: "http://gpu-host:8000"}}), "an endpoint brings its own GPUs")

	// GPUs enough for the layout the run will choose: an explicit one must be offered and fit.
	require.NoError(t, GPUPreCheck(e, Config{GPUs: "0"}), "Wan2.1 runs single on one GPU")
	require.NoError(t, GPUPreCheck(e, Config{GPUs: "0,1", Layout: "cfg-2"}))
	assert.EqualError(t, GPUPreCheck(e, Config{GPUs: "0", Layout: "cfg-2"}),
		"check gpu-environment: Wan-AI/Wan2.1-T2V-1.3B: layout cfg-2 needs 2 GPUs; CUDA_VISIBLE_DEVICES=0 names 1 (MEDIAQUAL_GPUS, MEDIAQUAL_LAYOUT)")
	assert.ErrorContains(t, GPUPreCheck(e, Config{GPUs: "0,1,2,3", Layout: "ulysses-4"}), "does not offer layout ulysses-4; its layouts: single, cfg-2, ulysses-2")
	assert.ErrorContains(t, GPUPreCheck(e, Config{Layout: "ulysses-2"}), "needs 2 GPU(s) with 40 GB each; MEDIAQUAL_LAYOUT ulysses-2 takes 2")
	w22 := lookup(t, "Wan-AI/Wan2.2-TI2V-5B")
	require.NoError(t, os.MkdirAll(filepath.Join(root, w22.Bundle), 0o755))
	assert.ErrorContains(t, GPUPreCheck(w22, Config{}), "needs 2 GPU(s) with 80 GB each; its preferred layout cfg-2 takes 2")
	require.NoError(t, GPUPreCheck(w22, Config{GPUs: "0"}), "one GPU: Wan2.2 falls back to single")
}

// The native path and a launched mediaserve run the layout chosen once here from
// MEDIAQUAL_LAYOUT and MEDIAQUAL_GPUS; a row without layouts, or an endpoint, gets none.
func TestCaseLayout(t *testing.T) {
	for _, tc := range []struct {
		id     string
		cfg    Config
		want   spec.Layout
		errMsg string
	}{
		{"Wan-AI/Wan2.2-TI2V-5B", Config{GPUs: "0,1,2,3"}, "cfg-2", ""},
		{"Wan-AI/Wan2.2-TI2V-5B", Config{GPUs: "0"}, "single", ""},
		{"Wan-AI/Wan2.2-TI2V-5B", Config{GPUs: "0,1,2,3", Layout: "ulysses-4"}, "ulysses-4", ""},
		{"MiniMaxAI/MiniMax-H3", Config{GPUs: "0,1"}, "ulysses-2", ""},
		{"Wan-AI/Wan2.1-T2V-1.3B", Config{GPUs: "0", Layout: "ulysses-4"}, "", "does not offer layout ulysses-4"},
		{"Wan-AI/Wan2.2-TI2V-5B", Config{GPUs: "0,1", Layout: "cfg-2", Target: Target{Endpoint: "http://h:8000"}}, "", ""},
		{"ref-t2v", Config{GPUs: "0,1", Layout: "cfg-2"}, "", ""},
	} {
		c := &caseRun{Entry: lookup(t, tc.id), Config: tc.cfg}
		got, err := c.layout()
		if tc.errMsg != "" {
			assert.ErrorContains(t, err, tc.errMsg, tc.id)
			continue
		}
		require.NoError(t, err, tc.id)
		assert.Equal(t, tc.want, got, "%s %+v", tc.id, tc.cfg)
	}
}

func TestProgressLinesDuringLongRuns(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"video_1","object":"video","status":"in_progress","progress":25},{"id":"video_0","object":"video","status":"completed","progress":100}]}`)
	}))
	defer hs.Close()
	c := &caseRun{Entry: lookup(t, "ref-t2v"), ctx: context.Background()}
	var mu sync.Mutex
	var lines []string
	stop := c.showProgress(&serving{API: &client.Client{BaseURL: hs.URL}}, func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(f, a...))
	}, 20*time.Millisecond)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(lines) >= 2 }, 5*time.Second, 10*time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "progress: video_1 in_progress 25%", lines[0], "only unfinished jobs")
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
	refs := filepath.Join(dir, spec.ReferenceOutputsDir)
	run := func() (*referenceOutputs, []error) {
		r := &referenceOutputs{dir: refs, c: spec.ReferenceOutputs{MinSSIM: 0.85}, lowest: 1}
		var errs []error
		for _, key := range []string{"cat-sepia", "dog-grey"} {
			if err := r.compare(ctx, key, got[key], spec.ImageEdit); err != nil {
				errs = append(errs, err)
			}
		}
		return r, errs
	}

	r, errs := run()
	require.Empty(t, errs)
	runNative := nativeOutputs{"cat-sepia": {Actual: api.Actual{Engine: "eager"}}, "dog-grey": {Actual: api.Actual{Engine: "eager"}}}
	assert.Contains(t, r.summary(runNative), "carries no reference outputs", "absent: said, not passed off as compared")

	writePNG(filepath.Join(refs, "cat-sepia.png"), 0)
	_, errs = run()
	require.Len(t, errs, 1)
	assert.ErrorContains(t, errs[0], "check reference-output: dog-grey:", "a partial set names the missing input")

	writePNG(filepath.Join(refs, "dog-grey.png"), 1)
	r, errs = run()
	require.Empty(t, errs)
	assert.Equal(t, "2 outputs match the bundle's reference outputs (lowest mean SSIM 1.000, at least 0.850; "+
		"made by a pipeline no recipe.json names: their engine and layout are unknown)", r.summary(runNative))
	assert.Equal(t, "the bundle's reference outputs are not known to be made elsewhere: no recipe.json names the pipeline that made them", r.capWhy(),
		"unnamed: compared, but they lift no cap")
	// Made by another pipeline, which their recipe names: the only ones that lift the cap.
	require.NoError(t, os.WriteFile(filepath.Join(refs, recipeFile), []byte(`{"written_by": "upstream", "pipeline": "plain diffusers 0.42.1 QwenImageEditPlusPipeline"}`), 0o644))
	assert.Empty(t, r.capWhy())
	assert.Contains(t, r.summary(runNative), "match the bundle's reference outputs, made by plain diffusers 0.42.1 QwenImageEditPlusPipeline (")
	require.NoError(t, os.WriteFile(filepath.Join(refs, recipeFile), []byte(`{"written_by": "upstream"}`), 0o644))
	assert.Equal(t, "the bundle's reference outputs are not known to be made elsewhere: their recipe.json names no pipeline", r.capWhy())
	require.NoError(t, os.Remove(filepath.Join(refs, recipeFile)))

	writePNG(filepath.Join(refs, "dog-grey.png"), 23) // another output for the same input
	r, errs = run()
	require.Len(t, errs, 1)
	assert.ErrorContains(t, errs[0], "check reference-output: mean SSIM")
	assert.InDelta(t, 1.0, r.ssim["cat-sepia"], 1e-9, "the SSIM measured is reported, pass or fail")
	assert.Less(t, r.ssim["dog-grey"], 0.85)
	require.NoError(t, os.RemoveAll(refs))

	// Written on request from native outputs, then held to from the next run on.
	native := nativeOutputs{}
	for key, shift := range map[string]int{"cat-sepia": 0, "dog-grey": 1} {
		p := filepath.Join(dir, "native", key+".png")
		writePNG(p, shift)
		native[key] = nativeOutput{Path: p, Actual: api.Actual{Steps: 20, Seed: 42, Precision: "bf16", Engine: "regional-compile", Layout: "single"}}
	}
	w := &referenceOutputs{dir: refs}
	n, err := w.write(native, spec.ImageEdit, false)
	require.NoError(t, err)
	assert.Zero(t, n, "not asked")
	n, err = w.write(native, spec.ImageEdit, true)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.NoError(t, w.compare(ctx, "dog-grey", got["cat-sepia"], spec.ImageEdit), "the writing run compares nothing")
	r, errs = run()
	assert.Empty(t, errs)
	assert.Equal(t, 2, r.compared, "the next run holds the outputs to them")
	assert.Contains(t, r.summary(native), "made with this run's runtime (engine regional-compile, layout single)")
	// ... as a regression baseline of the same pipeline, which lifts no cap (before, it did:
	// the pipeline was then compared with itself).
	assert.Contains(t, r.summary(native), "2 outputs match the regression baseline this suite wrote earlier")
	assert.Contains(t, r.capWhy(), "a regression baseline of the same pipeline, not outputs made elsewhere")
	var rec recipe
	b, err := os.ReadFile(filepath.Join(refs, recipeFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rec))
	assert.Equal(t, suitePipeline, rec.Pipeline)
	require.NoError(t, os.WriteFile(filepath.Join(refs, recipeFile), bytes.Replace(b, []byte(`"pipeline": "mediaqual native path",`), nil, 1), 0o644))
	assert.Contains(t, r.capWhy(), "regression baseline", "a recipe written before it named the pipeline: its written_by says the suite")
	require.NoError(t, os.WriteFile(filepath.Join(refs, recipeFile), b, 0o644))

	// Keyed by runtime: a later run under another engine or layout is told so, per input.
	other := nativeOutputs{}
	for key, n := range native {
		n.Actual.Engine = "eager"
		if key == "dog-grey" {
			n.Actual.Layout = "cfg-2"
		}
		other[key] = n
	}
	assert.Contains(t, r.summary(other), "another runtime, so bytes may differ (cat-sepia: made with engine regional-compile, layout single, "+
		"this run engine eager, layout single; dog-grey: made with engine regional-compile, layout single, this run engine eager, layout cfg-2)")
	require.NoError(t, os.WriteFile(filepath.Join(refs, recipeFile), []byte("{"), 0o644))
	assert.Contains(t, r.summary(native), "their recipe.json is unreadable")
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
	return dir
}

func newCase(t *testing.T, id string) *caseRun {
	e := lookup(t, id)
	row := NewRow(e)
	return &caseRun{T: t, Entry: e, Row: &row, Config: Config{GPUs: "0"}, ctx: context.Background()}
}

// A bundle whose revision is not the row's fails the inventory stage, naming both, before
// anything loads.
func TestInventoryFailsOnAnotherRevision(t *testing.T) {
	const other = "0123456789abcdef0123456789abcdef01234567"
	for _, id := range []string{"Qwen/Qwen-Image-Edit-2511", "Wan-AI/Wan2.2-TI2V-5B"} { // full and short revisions
		e := lookup(t, id)
		fakeBundle(t, e, other)
		_, _, err := newCase(t, id).inventory()
		require.Error(t, err, id)
		assert.Contains(t, err.Error(), "check bundle-revision:", id)
		assert.Contains(t, err.Error(), e.Revision, id)
		assert.Contains(t, err.Error(), other, id)

		// The row's own revision passes (a short one as the prefix of the full commit).
		full := e.Revision + other[len(e.Revision):]
		fakeBundle(t, e, full)
		b, msg, err := newCase(t, id).inventory()
		require.NoError(t, err, id)
		assert.Contains(t, msg, "bundle revision "+full+" matches the row's "+e.Revision)
		assert.Equal(t, full, b.Commit, "handed on to correctness")
	}
	assert.Equal(t, StageInventory, Stages(lookup(t, "Qwen/Qwen-Image-Edit-2511"))[0], "the inventory stage runs first")
}

// A bundle that states no revision cannot stand for a row that pins one.
func TestInventoryFailsOnABundleWithoutRevision(t *testing.T) {
	e := lookup(t, "Qwen/Qwen-Image-Edit-2511")
	dir := fakeBundle(t, e, "x")
	require.NoError(t, os.RemoveAll(filepath.Join(dir, ".cache")))
	_, _, err := newCase(t, e.ID).inventory()
	assert.ErrorContains(t, err, "check bundle-revision: the row pins revision "+e.Revision+", but the bundle states none")

	// An L0-random bundle is no revision's weights: not held to one, and capped.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "L0-RANDOM.txt"), nil, 0o644))
	c := newCase(t, e.ID)
	_, msg, err := c.inventory()
	require.NoError(t, err)
	assert.Contains(t, msg, "L0-random bundle: no revision to check")
	c.Row.Earn()
	assert.Equal(t, spec.Implemented, c.Row.Earned)
}

// A row without a revision runs, but can earn no more than implemented, and says why.
func TestRowWithoutRevisionEarnsAtMostImplemented(t *testing.T) {
	e := lookup(t, "Wan-AI/Wan2.1-T2V-1.3B")
	require.Empty(t, e.Revision, "the seeds give Wan2.1 no revision")
	fakeBundle(t, e, "0123456789abcdef0123456789abcdef01234567")
	c := newCase(t, e.ID)
	_, msg, err := c.inventory()
	require.NoError(t, err)
	assert.Contains(t, msg, "the row pins no revision, the bundle holds 0123456789abcdef0123456789abcdef01234567")
	c.Row.Earn()
	assert.Equal(t, spec.Implemented, c.Row.Earned)
	require.Len(t, c.Row.Limits, 1)
	assert.Contains(t, c.Row.Limits[0].Why, "nobody pinned these weights")
}

// The digest of a bundle is held to a published qualification of the same revision.
func TestBundleDigestComparedWithPublished(t *testing.T) {
	c := newCase(t, "Qwen/Qwen-Image-Edit-2511")
	c.Config.Root = "../.."
	b := bundleFacts{Commit: c.Entry.Revision}
	msg, err := c.publishedDigest(b, strings.Repeat("ab", 32))
	require.NoError(t, err)
	assert.Contains(t, msg, "no published qualification of revision "+c.Entry.Revision, "the published Qwen run was L0-random: not a revision's weights")
	c.Row.Profile = "L0-random"
	msg, err = c.publishedDigest(b, "x")
	require.NoError(t, err)
	assert.Empty(t, msg)
}

// A quick run asks for its counts by environment; a bad value is refused, not defaulted.
func TestRequestPlan(t *testing.T) {
	t.Setenv("MEDIAQUAL_WARMUP_REQUESTS", "")
	t.Setenv("MEDIAQUAL_MEASURED_REQUESTS", "")
	cfg, err := FromEnv(".", "")
	require.NoError(t, err)
	w, m := cfg.plan(4)
	assert.Equal(t, [2]int{1, 4}, [2]int{w, m}, "pinned: 1 + one per input")
	t.Setenv("MEDIAQUAL_WARMUP_REQUESTS", "0")
	t.Setenv("MEDIAQUAL_MEASURED_REQUESTS", "1")
	cfg, err = FromEnv(".", "")
	require.NoError(t, err)
	w, m = cfg.plan(4)
	assert.Equal(t, [2]int{0, 1}, [2]int{w, m})
	t.Setenv("MEDIAQUAL_MEASURED_REQUESTS", "0")
	_, err = FromEnv(".", "")
	assert.ErrorContains(t, err, "MEDIAQUAL_MEASURED_REQUESTS")
	t.Setenv("MEDIAQUAL_MEASURED_REQUESTS", "")

	t.Setenv("MEDIAQUAL_CONCURRENCY", "2")
	cfg, err = FromEnv(".", "")
	require.NoError(t, err)
	assert.Equal(t, 2, cfg.Concurrency)
	t.Setenv("MEDIAQUAL_CONCURRENCY", "two")
	_, err = FromEnv(".", "")
	assert.ErrorContains(t, err, `MEDIAQUAL_CONCURRENCY="two"`)
	t.Setenv("MEDIAQUAL_CONCURRENCY", "")

	t.Setenv(EnvLayout, "cfg-2")
	cfg, err = FromEnv(".", "")
	require.NoError(t, err)
	assert.Equal(t, spec.Layout("cfg-2"), cfg.Layout)
	t.Setenv(EnvLayout, "cfg2")
	_, err = FromEnv(".", "")
	assert.ErrorContains(t, err, `MEDIAQUAL_LAYOUT: layout "cfg2" is not a layout`)
}

// An endpoint's departures from the contract are findings in the row, not failures; an
// endpoint that follows it has none.
func TestEndpointDeparturesAreFindings(t *testing.T) {
	c := &caseRun{Config: Config{Target: Target{Profile: wire.SGLang}}}
	bad := wireStep("error", http.MethodPost, "/v1/videos")
	bad.Response.Status, bad.Response.Body = 422, []byte(`{"detail":"prompt: field required"}`)
	del := wireStep("delete", http.MethodDelete, "/v1/videos/v1")
	del.Response.Status, del.Response.Body = 200, []byte(`{"ok":true}`)
	c.steps = []wire.Step{bad, del, editStep([]byte(`{"created":1,"data":[{"b64_json":"eA=="}]}`))}
	var names []string
	for _, f := range c.assess() {
		names = append(names, f.Name)
	}
	// (sglang 0.5.23 reports in_progress: no "no-in-progress", issue #38 item 2.)
	for _, want := range []string{"error-envelope", "delete-shape", "edit-unconfirmed", "edit-no-timing"} {
		assert.Contains(t, names, want)
	}

	good := &caseRun{Config: Config{Target: Target{Profile: wire.Mediaserve}}}
	ok := wireStep("error", http.MethodPost, "/v1/videos")
	ok.Response.Status, ok.Response.Body = 400, []byte(`{"error":{"message":"model is required","type":"invalid_request_error","param":"model","code":"invalid_request"}}`)
	good.steps = []wire.Step{ok}
	assert.Empty(t, good.assess())
}

// A stage that could not compare is reported as not run, saying why: not passed, and not a
// failure (it read FAIL in the report of a passed row); the case is not failed by it.
func TestNotComparedIsNeverAPass(t *testing.T) {
	row := reports.Row{}
	c := &caseRun{T: t, Row: &row}
	c.stage("identity", func() (string, error) { return "", notCompared{"no native path"} })
	require.Len(t, row.Stages, 1)
	assert.False(t, row.Stages[0].Passed)
	assert.True(t, row.Stages[0].NotRun)
	assert.Equal(t, "not run", row.Stages[0].Mark())
	assert.Equal(t, "not run: no native path", row.Stages[0].Message)
	require.Len(t, row.Limits, 1, "and the row cannot earn more than implemented")
	assert.Equal(t, spec.Implemented, row.Limits[0].Ceiling)
}

// The row's layout is what /v1/models declared: the served GPU layout, lanes and their
// devices, nothing when the server does not say.
func TestLayoutFromTheModelsDeclaration(t *testing.T) {
	assert.Equal(t, "1 lane", layout(api.Model{Lanes: 1}))
	assert.Equal(t, "2 lanes, CUDA devices 0 | 1", layout(api.Model{Lanes: 2, LaneDevices: []string{"0", "1"}}))
	assert.Equal(t, "", layout(api.Model{}))
	assert.Equal(t, "cfg-2, 1 lane, CUDA devices 0,1", layout(api.Model{Lanes: 1, Layout: "cfg-2", LaneDevices: []string{"0,1"}}))
	assert.Equal(t, "cfg-2, 2 lanes, CUDA devices 0,1 | 2,3", layout(api.Model{Lanes: 2, Layout: "cfg-2", LaneDevices: []string{"0,1", "2,3"}}))
}

// Task speed comes from the reported denoise phase and the row's count; without either
// nothing is claimed. Encode quality averages only the artifacts where it was measured.
func TestTaskSpeedAndEncodeQuality(t *testing.T) {
	e := spec.Entry{Checkpoint: spec.Checkpoint{Defaults: spec.Settings{Steps: 2}},
		DenoiseFLOPs: func(spec.Settings) float64 { return 2e12 }}
	withDenoise := artifact{PSNR: 30}
	withDenoise.timing = &api.Timing{TaskPhasesMS: map[string]float64{"denoise": 200}}
	tm := &reports.Timing{}
	taskSpeed(tm, e, []artifact{withDenoise, withDenoise})
	assert.Equal(t, 100.0, tm.DenoiseMSPerStep)
	assert.Equal(t, 2.0, tm.DenoiseTFLOPPerStep)
	assert.InDelta(t, 20.0, tm.AchievedTFLOPS, 1e-9)

	none := &reports.Timing{}
	taskSpeed(none, e, []artifact{{}})
	e.DenoiseFLOPs = nil
	taskSpeed(none, e, []artifact{withDenoise})
	assert.Zero(t, none.AchievedTFLOPS, "no phase or no count: no figure")

	encodeQuality(tm, []artifact{withDenoise, {PSNR: 40}, {}})
	assert.Equal(t, 30.0, tm.EncodePSNRMinDB)
	assert.Equal(t, 35.0, tm.EncodePSNRMeanDB)
}

// An endpoint qualified for a GPU row needs no bundle here (docs/EXTERNAL.md): inventory
// passes saying so, correctness and identity are "not run", each recorded as not passed
// and capping the row at implemented. Before, inventory failed check gpu-environment asking
// for MEDIAQUAL_BUNDLES.
func TestEndpointGPURowNeedsNoLocalBundle(t *testing.T) {
	for _, root := range []string{"", t.TempDir()} { // unset, and set without this bundle
		t.Setenv("MEDIAQUAL_BUNDLES", root)
		e := lookup(t, "Wan-AI/Wan2.1-T2V-1.3B")
		row := NewRow(e)
		c := &caseRun{T: t, Entry: e, Row: &row, ctx: context.Background(), Config: Config{
			Mediaserve: "/usr/local/bin/mediaserve", Target: Target{Endpoint: "http://gpu-host:8000", Profile: wire.Mediaserve}}}
		var b bundleFacts
		require.True(t, c.stage(StageInventory, func() (s string, err error) { b, s, err = c.inventory(); return }), "inventory")
		c.stage(StageCorrectness, func() (string, error) { _, s, err := c.correctness(b); return s, err })
		c.stage(StageIdentity, func() (string, error) {
			return c.identity(nil, artifactSet{Served: []artifact{{Path: "served.mp4"}}})
		})
		require.Len(t, row.Stages, 3)
		assert.True(t, row.Stages[0].Passed)
		assert.Contains(t, row.Stages[0].Message, "no local bundle")
		for _, s := range row.Stages[1:] {
			assert.False(t, s.Passed, s.Name)
			assert.True(t, strings.HasPrefix(s.Message, "not run: no native path"), "%s: %s", s.Name, s.Message)
			assert.True(t, s.NotRun, s.Name)
		}
		require.Len(t, row.Limits, 2)
		row.Earn()
		assert.Equal(t, spec.Implemented, row.Earned, "capped, never passed")
	}
}

// Updating the goldens keeps other rows' entries, and refuses a file it cannot parse instead of
// replacing it with this row's entries alone (which it did, ignoring the error).
func TestCorruptGoldensAreRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "goldens.json")
	e := lookup(t, "ref-t2v")
	e.Goldens = file
	c := &caseRun{Entry: e}
	require.NoError(t, os.WriteFile(file, []byte(`{"other/a": "1"}`), 0o644))
	require.NoError(t, c.saveGoldens(map[string]string{"ref-t2v/a": "2"}))
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.JSONEq(t, `{"other/a": "1", "ref-t2v/a": "2"}`, string(b), "other rows' entries kept")

	corrupt := []byte(`{"other/a": "1", "ref-t2v/a": `)
	require.NoError(t, os.WriteFile(file, corrupt, 0o644))
	err = c.saveGoldens(map[string]string{"ref-t2v/a": "3"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "check golden: ")
	b, err = os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, string(corrupt), string(b), "the corrupt file is left for a person to look at")
}

// A tool queried for the report (nvidia-smi, ffmpeg, python3) that hangs ends with the run's
// context or toolTimeout, whichever is first, instead of hanging the run.
func TestToolOutputIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := toolOutput(ctx, "sleep", "60")
	require.Error(t, err)
	assert.Less(t, time.Since(start), 15*time.Second)
	out, err := toolOutput(context.Background(), "echo", "ok")
	require.NoError(t, err)
	assert.Equal(t, "ok\n", out)
}
