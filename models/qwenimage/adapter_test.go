package qwenimage

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
	"github.com/mediaqual/mediaqual/models/spec"
)

// The Qwen-Image-Edit adapter is Python (adapter.py, a docs/WORKER.md worker on
// models/pyworker); these tests run its unit tests and check that it maps the row's settings
// the way the row declares them.
// The Python unit tests run under the CPU torch virtualenv (make torch), so the tiny real
// pipeline runs too; its two classes that start one (TinyPipelineTest, CompiledEngineTest)
// run side by side, over one tiny bundle built here first (test_adapter.build_tiny) and named
// to both in MEDIAQUAL_QWENIMAGE_TINY, which they only read.

func TestAdapterPythonUnitTests(t *testing.T) {
	python := pytest.TorchPython(t)
	tiny := t.TempDir()
	out, err := pytest.Command(python, "-c", "import sys, test_adapter; test_adapter.build_tiny(sys.argv[1])", tiny).CombinedOutput()
	require.NoError(t, err, "building the tiny bundle: %s", out)
	pytest.UnchangedAfter(t, tiny)
	pytest.UnitTestClassesWith(t, python, "test_adapter", "MEDIAQUAL_QWENIMAGE_TINY="+tiny)
}

// mapScript reads a list of settings on stdin and prints, per item, the adapter's pipeline
// kwargs (the generator replaced by its seed, the image by a marker) and actual report, or its
// error.
const mapScript = `
import json, sys
import adapter
out = []
for s in json.load(sys.stdin):
    try:
        kw = adapter.pipeline_kwargs(s, "ref", lambda seed: seed)
        out.append({"kwargs": kw, "actual": adapter.actual_for(s, kw["width"], kw["height"], kw["num_inference_steps"])})
    except adapter.JobError as e:
        out.append({"error": e.code, "param": e.param})
json.dump(out, sys.stdout)
`

type mapped struct {
	Kwargs struct {
		Image          []string `json:"image"`
		Prompt         string   `json:"prompt"`
		NegativePrompt string   `json:"negative_prompt"`
		TrueCFGScale   float64  `json:"true_cfg_scale"`
		GuidanceScale  float64  `json:"guidance_scale"`
		Steps          int      `json:"num_inference_steps"`
		Height         int      `json:"height"`
		Width          int      `json:"width"`
		Generator      int64    `json:"generator"`
		NumImages      int      `json:"num_images_per_prompt"`
		OutputType     string   `json:"output_type"`
	} `json:"kwargs"`
	Actual spec.Actual `json:"actual"`
	Error  string      `json:"error"`
	Param  string      `json:"param"`
}

func runMapping(t *testing.T, items []spec.Settings) []mapped {
	return pytest.Each[spec.Settings, mapped](t, mapScript, items)
}

func TestAdapterMapsEveryDeclaredSetting(t *testing.T) {
	e := Entries()[0]
	require.Equal(t, "true_cfg_scale", e.Controls.GuidanceParam)
	var items []spec.Settings
	d := e.Defaults
	d.Prompt = "make the sky purple"
	items = append(items, d)
	for _, size := range e.Controls.Sizes {
		s := d
		s.Size, s.NegativePrompt, s.Seed = size, "blurry", -7
		items = append(items, s)
	}
	s := d
	s.NegativePrompt, s.Steps, s.Guidance, s.Seed = "", e.Controls.Steps.Max, e.Controls.Guidance.Max, 1<<62
	items = append(items, s)
	s = d
	s.Steps, s.Guidance = e.Controls.Steps.Min, e.Controls.Guidance.Min
	items = append(items, s)
	for i, got := range runMapping(t, items) {
		s := items[i]
		require.Empty(t, got.Error, "%+v rejected (%s)", s, got.Param)
		k := got.Kwargs
		assert.Equal(t, []string{"ref"}, k.Image)
		assert.Equal(t, s.Prompt, k.Prompt)
		neg := s.NegativePrompt
		if neg == "" {
			neg = e.Defaults.NegativePrompt // omitted on the wire: the pinned " "
		}
		assert.Equal(t, neg, k.NegativePrompt)
		assert.Equal(t, s.Guidance, k.TrueCFGScale)
		assert.Equal(t, 1.0, k.GuidanceScale)
		assert.Equal(t, s.Steps, k.Steps)
		assert.Equal(t, [2]int{s.Size.W, s.Size.H}, [2]int{k.Width, k.Height})
		assert.Equal(t, s.Seed, k.Generator)
		assert.Equal(t, 1, k.NumImages)
		assert.Equal(t, "pt", k.OutputType)
		assert.Equal(t, spec.Actual{Width: s.Size.W, Height: s.Size.H, Steps: s.Steps, Guidance: s.Guidance,
			Seed: s.Seed, Precision: e.Precision}, got.Actual)
	}
	assert.Equal(t, " ", e.Defaults.NegativePrompt, "the adapter's NEGATIVE_DEFAULT is the row's pinned one")
}

// TestAdapterRefusesStepsBelowTheRow: one step gives a NaN image with the snapshot's scheduler;
// the row declares steps from 2, and the adapter refuses fewer rather than return NaN.
func TestAdapterRefusesStepsBelowTheRow(t *testing.T) {
	e := Entries()[0]
	s := e.Defaults
	s.Prompt, s.Steps = "make the sky purple", e.Controls.Steps.Min-1
	got := runMapping(t, []spec.Settings{s})
	assert.Equal(t, "unsupported_value", got[0].Error)
	assert.Equal(t, "num_inference_steps", got[0].Param)
}

// TestRowArgvStartsTheAdapter runs the row's worker argv without its bundle.
func TestRowArgvStartsTheAdapter(t *testing.T) {
	e := Entries()[0]
	require.Equal(t, []string{"python3", "models/qwenimage/adapter.py", "--bundle-name", e.Bundle, "--warmup-size", "1024x1024"}, e.Worker)
	pytest.ExpectFatalWithoutBundle(t, e.Worker, e.Bundle)
}
