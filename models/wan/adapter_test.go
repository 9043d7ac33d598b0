package wan

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
	"github.com/mediaqual/mediaqual/models/spec"
)

// The Wan adapter is Python (adapter.py, a docs/WORKER.md worker); these tests run its unit
// tests and check that it maps every row's settings the way the rows declare them.

// TestAdapterPythonUnitTests runs test_adapter under the CPU torch virtualenv (make torch), so
// the tiny real pipelines run too: the protocol over a real WanPipeline, and frames streamed
// while the VAE decodes, for Wan2.1's VAE and Wan2.2's patched one, over the tiny bundles
// built once for the package (tinyBundles), named in MEDIAQUAL_WAN_TINY, which they only read.
func TestAdapterPythonUnitTests(t *testing.T) {
	python := pytest.TorchPython(t)
	pytest.UnitTestsWith(t, python, "test_adapter", "MEDIAQUAL_WAN_TINY="+tinyBundles(t, python))
}

// tiny is the bundles root of tinyBundles, built once for the package's tests and removed by
// TestMain after them.
var tiny struct {
	once sync.Once
	root string
	err  error
}

// tinyBundles is a bundles root with Wan2.1's and Wan2.2's tiny L0 bundles
// (test_adapter.build_tiny: build_l0.py --tiny --device cpu of each variant, in one process),
// built on the first call; t fails if it changes while t runs, as the tests sharing it only
// read it.
func tinyBundles(t *testing.T, python string) string {
	t.Helper()
	tiny.once.Do(func() {
		tiny.root, tiny.err = os.MkdirTemp("", "wan-tiny-")
		if tiny.err != nil {
			return
		}
		out, err := pytest.Command(python, "-c", "import sys, test_adapter; test_adapter.build_tiny(sys.argv[1])", tiny.root).CombinedOutput()
		if err != nil {
			tiny.err = fmt.Errorf("building the tiny bundles: %v: %s", err, out)
		}
	})
	require.NoError(t, tiny.err)
	pytest.UnchangedAfter(t, tiny.root)
	return tiny.root
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tiny.root != "" {
		_ = os.RemoveAll(tiny.root)
	}
	os.Exit(code)
}

// pinned are the family's per-checkpoint facts the adapter depends on: the UniPC flow_shift
// (argv) and the size granularity of the pipeline (VAE spatial factor x patch), which the
// adapter reads from the loaded pipeline and which every declared size must respect.
var pinned = map[string]struct {
	flowShift string
	multiple  int
}{
	"Wan-AI/Wan2.1-T2V-1.3B": {"3.0", 16}, // VAE 8x, patch 2
	"Wan-AI/Wan2.2-TI2V-5B":  {"5.0", 32}, // VAE 16x, patch 2
}

// mapScript reads [{settings, multiple}] on stdin and prints, per item, the adapter's
// pipeline kwargs (the generator replaced by its seed) and actual report, or its error.
const mapScript = `
import json, sys
import adapter
out = []
for item in json.load(sys.stdin):
    try:
        kw = adapter.pipeline_kwargs(item["settings"], lambda s: s, size_multiple=(item["multiple"], item["multiple"]))
        w, h = kw["width"], kw["height"]
        out.append({"kwargs": kw, "actual": adapter.actual_for(item["settings"], kw["num_frames"], w, h, kw["num_inference_steps"])})
    except adapter.JobError as e:
        out.append({"error": e.code, "param": e.param})
json.dump(out, sys.stdout)
`

type mapped struct {
	Kwargs struct {
		Prompt         string  `json:"prompt"`
		NegativePrompt string  `json:"negative_prompt"`
		Height         int     `json:"height"`
		Width          int     `json:"width"`
		NumFrames      int     `json:"num_frames"`
		Steps          int     `json:"num_inference_steps"`
		GuidanceScale  float64 `json:"guidance_scale"`
		Generator      int64   `json:"generator"`
		OutputType     string  `json:"output_type"`
	} `json:"kwargs"`
	Actual spec.Actual `json:"actual"`
	Error  string      `json:"error"`
	Param  string      `json:"param"`
}

type mapItem struct {
	Settings spec.Settings `json:"settings"` // marshalled exactly as server/worker sends it
	Multiple int           `json:"multiple"`
}

func runMapping(t *testing.T, items []mapItem) []mapped {
	return pytest.Each[mapItem, mapped](t, mapScript, items)
}

func TestAdapterMapsEveryDeclaredSetting(t *testing.T) {
	var items []mapItem
	var want []spec.Settings
	for _, e := range Entries() {
		p, ok := pinned[e.ID]
		require.True(t, ok, "no pinned facts for %s in this test", e.ID)
		assert.Contains(t, e.NativeTask, "flow_shift "+p.flowShift, e.ID)
		add := func(s spec.Settings) {
			items = append(items, mapItem{s, p.multiple})
			want = append(want, s)
		}
		add(e.Defaults)
		for _, size := range e.Controls.Sizes {
			s := e.Defaults
			s.Size, s.NegativePrompt, s.Seed = size, "blurry, static", -7
			add(s)
		}
		s := e.Defaults
		s.NumFrames, s.Steps, s.Guidance, s.Seed = e.Controls.Frames.Range.Max, e.Controls.Steps.Min, e.Controls.Guidance.Max, 1<<62
		add(s)
	}
	for i, got := range runMapping(t, items) {
		s := want[i]
		require.Empty(t, got.Error, "%+v rejected (%s)", s, got.Param)
		k := got.Kwargs
		assert.Equal(t, s.Prompt, k.Prompt)
		assert.Equal(t, s.NegativePrompt, k.NegativePrompt)
		assert.Equal(t, [2]int{s.Size.W, s.Size.H}, [2]int{k.Width, k.Height})
		assert.Equal(t, s.NumFrames, k.NumFrames)
		assert.Equal(t, s.Steps, k.Steps)
		assert.Equal(t, s.Guidance, k.GuidanceScale)
		assert.Equal(t, s.Seed, k.Generator)
		assert.Equal(t, "pt", k.OutputType)
		// What the adapter reports for a clip of exactly the asked shape is what the server
		// checks against the request.
		assert.Equal(t, spec.Actual{NumFrames: s.NumFrames, Width: s.Size.W, Height: s.Size.H, FPS: s.FPS,
			DurationS: float64(s.NumFrames) / float64(s.FPS), Steps: s.Steps, Guidance: s.Guidance, Seed: s.Seed,
			Precision: "bf16"}, got.Actual)
	}
}

func TestAdapterFrameRuleAgreesWithTheRows(t *testing.T) {
	e := Entries()[0]
	var items []mapItem
	for n := e.Controls.Frames.Range.Min - 4; n <= e.Controls.Frames.Range.Max; n++ {
		s := e.Defaults
		s.NumFrames = n
		items = append(items, mapItem{s, 16})
	}
	for i, got := range runMapping(t, items) {
		n := items[i].Settings.NumFrames
		inRange := n >= e.Controls.Frames.Range.Min
		if got.Error == "" {
			assert.True(t, !inRange || frames4k1.Allows(n), "adapter accepts %d frames, the row does not", n)
			assert.Zero(t, (n-1)%4, "adapter accepts %d frames", n)
		} else {
			assert.False(t, frames4k1.Allows(n), "adapter rejects %d frames, the row allows them", n)
			assert.Equal(t, "unsupported_value", got.Error)
			assert.Equal(t, "num_frames", got.Param)
		}
	}
}

// TestWorkerArgvStartsTheAdapter runs each row's own Worker argv, without its bundle, after
// checking it carries the row's pinned flow_shift.
func TestWorkerArgvStartsTheAdapter(t *testing.T) {
	for _, e := range Entries() {
		require.NoError(t, argvPins(e.Worker, pinned[e.ID].flowShift, e.Bundle), e.ID)
		require.NoError(t, argvWarmsUp(e.Worker, e.Defaults), e.ID)
		pytest.ExpectFatalWithoutBundle(t, e.Worker, e.Bundle)
	}
}

// argvPins checks a worker argv passes exactly the flow shift and bundle name a row pins.
func argvPins(argv []string, flowShift, bundle string) error {
	got := map[string]string{}
	for i := 0; i+1 < len(argv); i++ {
		if strings.HasPrefix(argv[i], "--") {
			got[argv[i]] = argv[i+1]
		}
	}
	if got["--flow-shift"] != flowShift || got["--bundle-name"] != bundle {
		return fmt.Errorf("worker argv %v: --flow-shift %q --bundle-name %q, the row pins %q and %q", argv, got["--flow-shift"], got["--bundle-name"], flowShift, bundle)
	}
	return nil
}

// argvWarmsUp checks a worker argv warms up at the row's pinned shape (so a compiled engine
// never compiles inside a timed job).
func argvWarmsUp(argv []string, pinned spec.Settings) error {
	got := map[string]string{}
	for i := 0; i+1 < len(argv); i++ {
		if strings.HasPrefix(argv[i], "--") {
			got[argv[i]] = argv[i+1]
		}
	}
	// A slice, not a map: the first wrong flag named must not depend on iteration order.
	want := [][2]string{{"--warmup-size", pinned.Size.String()}, {"--warmup-frames", strconv.Itoa(pinned.NumFrames)}}
	for _, kv := range want {
		if got[kv[0]] != kv[1] {
			return fmt.Errorf("worker argv %v: %s %q, the row's is %q", argv, kv[0], got[kv[0]], kv[1])
		}
	}
	return nil
}

// The argv checks fed rows that start the adapter with the wrong settings.
func TestArgvPinsCatchesAWrongWorker(t *testing.T) {
	e := Entries()[0]
	require.NoError(t, argvPins(e.Worker, "3.0", e.Bundle))
	assert.ErrorContains(t, argvPins(worker("5.0", e.Bundle, wan21), "3.0", e.Bundle), `--flow-shift "5.0"`)
	assert.Error(t, argvPins([]string{"python3", "models/wan/adapter.py", "--bundle-name", e.Bundle}, "3.0", e.Bundle), "no flow shift")
	assert.Error(t, argvPins(worker("3.0", "Wan-AI/Wan2.2-TI2V-5B-Diffusers", wan21), "3.0", e.Bundle), "another bundle")
	require.NoError(t, argvWarmsUp(e.Worker, e.Defaults))
	assert.ErrorContains(t, argvWarmsUp(worker("3.0", e.Bundle, wan22), e.Defaults), `--warmup-size "1280x704"`)
}
