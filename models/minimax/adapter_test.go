package minimax

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
	"github.com/mediaqual/mediaqual/models/spec"
)

// The MiniMax-H3 adapter is Python (adapter.py, a docs/WORKER.md worker on models/pyworker);
// these tests run its unit tests and check that it maps the row's settings the way the row
// declares them and refuses what the row does not declare.
// The Python unit tests run under the CPU torch virtualenv (make torch), so the tiny real
// pipeline runs too.

func TestAdapterPythonUnitTests(t *testing.T) {
	pytest.UnitTestsWith(t, pytest.TorchPython(t), "test_adapter")
}

// mapScript reads a list of settings on stdin and prints, per item, the adapter's pipeline
// kwargs (the generator replaced by its seed) and actual report, or its error.
const mapScript = `
import json, sys
import adapter
out = []
for s in json.load(sys.stdin):
    try:
        kw = adapter.pipeline_kwargs(s, lambda seed: seed)
        out.append({"kwargs": kw, "actual": adapter.actual_for(s, kw["num_frames"], kw["width"], kw["height"], kw["num_inference_steps"])})
    except adapter.JobError as e:
        out.append({"error": e.code, "param": e.param})
json.dump(out, sys.stdout)
`

type mapped struct {
	Kwargs map[string]any `json:"kwargs"`
	Actual spec.Actual    `json:"actual"`
	Error  string         `json:"error"`
	Param  string         `json:"param"`
}

func runMapping(t *testing.T, items []spec.Settings) []mapped {
	return pytest.Each[spec.Settings, mapped](t, mapScript, items)
}

func withPrompt() spec.Settings {
	s := Entries()[0].Defaults
	s.Prompt = "a red fox trotting through fresh snow"
	return s
}

func TestAdapterMapsEveryDeclaredSetting(t *testing.T) {
	e := Entries()[0]
	c := e.Controls
	var items []spec.Settings
	items = append(items, withPrompt())
	for _, size := range c.Sizes {
		s := withPrompt()
		s.Size, s.Seed = size, -7
		items = append(items, s)
	}
	for _, n := range []int{c.Frames.Range.Min, c.Frames.Range.Min + c.Frames.Step, c.Frames.Range.Max} {
		s := withPrompt()
		s.NumFrames = n
		items = append(items, s)
	}
	for _, steps := range []int{c.Steps.Min, c.Steps.Max} {
		s := withPrompt()
		s.Steps, s.Guidance, s.Seed = steps, c.Guidance.Max, 1<<62
		items = append(items, s)
	}
	for i, got := range runMapping(t, items) {
		s := items[i]
		require.Empty(t, got.Error, "%+v rejected (%s)", s, got.Param)
		assert.Equal(t, map[string]any{
			"prompt": s.Prompt, "height": float64(s.Size.H), "width": float64(s.Size.W),
			"num_frames": float64(s.NumFrames), "num_inference_steps": float64(s.Steps),
			"generator": float64(s.Seed), "output_type": "pt",
		}, got.Kwargs, "t2va: no guidance_scale, negative_prompt or fps reaches the pipeline")
		// What the adapter reports for a clip of exactly the asked shape is what the server
		// checks against the request.
		assert.Equal(t, spec.Actual{NumFrames: s.NumFrames, Width: s.Size.W, Height: s.Size.H, FPS: s.FPS,
			DurationS: float64(s.NumFrames) / float64(s.FPS), Steps: s.Steps, Guidance: s.Guidance, Seed: s.Seed,
			Precision: e.Precision}, got.Actual)
	}
}

// The generator is compared through float64 above (JSON numbers); a seed beyond 2^53 still
// reaches it exactly.
func TestAdapterPassesTheSeedExactly(t *testing.T) {
	s := withPrompt()
	s.Seed = 1<<62 + 1
	var got []struct {
		Kwargs struct {
			Generator int64 `json:"generator"`
		} `json:"kwargs"`
	}
	pytest.Script(t, mapScript, []spec.Settings{s}, &got)
	require.Len(t, got, 1)
	assert.Equal(t, s.Seed, got[0].Kwargs.Generator)
}

func TestAdapterFrameRuleAgreesWithTheRow(t *testing.T) {
	rule := Entries()[0].Controls.Frames
	var items []spec.Settings
	for n := 1; n <= rule.Range.Max+40; n++ {
		s := withPrompt()
		s.NumFrames = n
		items = append(items, s)
	}
	for i, got := range runMapping(t, items) {
		n := items[i].NumFrames
		if rule.Allows(n) {
			assert.Empty(t, got.Error, "adapter rejects %d frames, the row allows them", n)
		} else {
			assert.Equal(t, "unsupported_value", got.Error, "adapter accepts %d frames, the row does not", n)
			assert.Equal(t, "num_frames", got.Param)
		}
	}
}

// TestAdapterRefusesWhatTheRowDoesNotDeclare: the pipeline would silently ignore guidance and
// a negative prompt, and generates only at 24 fps; the server rejects these first, and the
// adapter does not rely on it.
func TestAdapterRefusesWhatTheRowDoesNotDeclare(t *testing.T) {
	c := Entries()[0].Controls
	require.False(t, c.NegativePrompt)
	cases := map[string]func(*spec.Settings){
		"guidance":            func(s *spec.Settings) { s.Guidance = c.Guidance.Max + 1 },
		"negative_prompt":     func(s *spec.Settings) { s.NegativePrompt = "blurry" },
		"fps":                 func(s *spec.Settings) { s.FPS = 16 },
		"num_inference_steps": func(s *spec.Settings) { s.Steps = c.Steps.Min - 1 },
		"size":                func(s *spec.Settings) { s.Size = spec.Size{W: 1280, H: 720} },
	}
	var params []string
	var items []spec.Settings
	for param, breakIt := range cases {
		s := withPrompt()
		breakIt(&s)
		params = append(params, param)
		items = append(items, s)
	}
	for i, got := range runMapping(t, items) {
		assert.Equal(t, "unsupported_value", got.Error, params[i])
		assert.Equal(t, params[i], got.Param)
	}
}

// TestWorkerArgvStartsTheAdapter runs the row's argv without its bundle.
func TestWorkerArgvStartsTheAdapter(t *testing.T) {
	e := Entries()[0]
	require.Equal(t, worker(e.Bundle, e.Defaults), e.Worker)
	pytest.ExpectFatalWithoutBundle(t, e.Worker, e.Bundle)
}
