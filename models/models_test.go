package models_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/fixtures"
	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
)

func TestInventoryRowsAreComplete(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range models.Inventory() {
		assert.Empty(t, e.Problems(), e.ID)
		assert.False(t, seen[e.ID], "%s listed twice", e.ID)
		seen[e.ID] = true
		_, err := fixtures.Load(e.Fixtures)
		assert.NoError(t, err, e.ID)
	}
	for _, id := range []string{"Wan-AI/Wan2.1-T2V-1.3B", "Wan-AI/Wan2.2-TI2V-5B", "MiniMaxAI/MiniMax-H3",
		"nvidia/Cosmos3-Nano", "Lightricks/LTX-Video", "Qwen/Qwen-Image-Edit-2511", "ref-t2v", "ref-edit", "ref-t2i"} {
		assert.True(t, seen[id], "inventory lacks %s", id)
	}
}

func TestProblemsCatchesIncompleteRows(t *testing.T) {
	e, err := models.Lookup("ref-t2v")
	require.NoError(t, err)
	for name, breakIt := range map[string]func(*spec.Entry){
		"no revision":                           func(e *spec.Entry) { e.Revision = "" },
		"no contract":                           func(e *spec.Entry) { e.Video = nil },
		"frame rule":                            func(e *spec.Entry) { e.Defaults.NumFrames = 16 },
		"wrong workload":                        func(e *spec.Entry) { e.Workload = spec.ImageEdit },
		"gap without note":                      func(e *spec.Entry) { e.Status, e.Note = spec.CapabilityGap, "" },
		"implemented no task":                   func(e *spec.Entry) { e.NewTask = nil },
		"bundle, no reference-output criterion": func(e *spec.Entry) { e.Bundle = "x/y" },
		"reference-output SSIM above 1": func(e *spec.Entry) {
			e.Bundle, e.ReferenceOutputs = "x/y", &spec.ReferenceOutputs{MinSSIM: 1.5}
		},
		"bad layout":               func(e *spec.Entry) { e.Worker, e.Layouts = []string{"w"}, []spec.Layout{"ulysses-1"} },
		"layout twice":             func(e *spec.Entry) { e.Worker, e.Layouts = []string{"w"}, []spec.Layout{"single", "single"} },
		"layouts without worker":   func(e *spec.Entry) { e.Layouts = []spec.Layout{"single"} },
		"served layout on the row": func(e *spec.Entry) { e.Worker, e.Layouts, e.Layout = []string{"w"}, []spec.Layout{"single"}, "single" },
	} {
		broken := e
		breakIt(&broken)
		assert.NotEmpty(t, broken.Problems(), name)
	}
}

// The GPU rows offer their layouts in the measured (or, where unmeasured, stated) order; the
// in-process rows offer none.
func TestRowLayouts(t *testing.T) {
	for id, want := range map[string][]spec.Layout{
		"Wan-AI/Wan2.1-T2V-1.3B":    {"single", "cfg-2", "ulysses-2"},
		"Wan-AI/Wan2.2-TI2V-5B":     {"cfg-2", "ulysses-2", "ulysses-4", "single"},
		"Qwen/Qwen-Image-Edit-2511": {"single", "cfg-2", "ulysses-2"},
		"MiniMaxAI/MiniMax-H3":      {"ulysses-4", "ulysses-2", "single"},
		"ref-t2v":                   nil,
	} {
		e, err := models.Lookup(id)
		require.NoError(t, err)
		assert.Equal(t, want, e.Layouts, id)
		assert.Empty(t, e.Layout, id)
	}
}

// Servable is exactly the inventory's rows with a Task, in inventory order, derived rather
// than listed so that adding a row needs no edit here (issue #28).
func TestServableHaveTasks(t *testing.T) {
	var want, got []string
	for _, e := range models.Inventory() {
		if e.NewTask != nil || len(e.Worker) > 0 {
			want = append(want, e.ID)
		}
	}
	for _, cp := range models.Servable() {
		got = append(got, cp.ID)
	}
	assert.Equal(t, want, got)
	assert.Subset(t, got, []string{"ref-t2v", "ref-edit", "ref-t2i", "Wan-AI/Wan2.1-T2V-1.3B", "Qwen/Qwen-Image-Edit-2511"})
	assert.NotContains(t, got, "nvidia/Cosmos3-Nano", "an excluded row has no Task")
	_, err := models.Lookup("nope")
	assert.ErrorContains(t, err, "unknown checkpoint")
}

// README's "Adding a checkpoint" names only files that exist and ends with `go generate .`;
// the tests that once held hand-written lists of rows (TestServableHaveTasks here,
// cmd/mediaserve's TestDefaultServesWhatCanLoadHere) derive them, so its steps are all there
// is to do. A row added to reference.Entries and to wan.Entries in a scratch copy passed
// ./models/... and ./cmd/... with these steps alone.
func TestReadmeAddingACheckpoint(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)\n## Adding a checkpoint\n(.*?)\n## ").FindSubmatch(b)
	require.NotNil(t, m, "README has no Adding a checkpoint section")
	section := string(m[1])
	paths := regexp.MustCompile("`((?:models|docs)/[^`<>]+)`|\\]\\(((?:models|docs)/[^)#]+)").FindAllStringSubmatch(section, -1)
	assert.NotEmpty(t, paths)
	for _, p := range paths {
		_, err := os.Stat("../" + p[1] + p[2])
		assert.NoError(t, err, "README's Adding a checkpoint names %s", p[1]+p[2])
	}
	assert.Contains(t, section, "`go generate .`")
}
