package models_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"mediaqual/fixtures"
	"mediaqual/models"
	"mediaqual/models/spec"
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
	} {
		broken := e
		breakIt(&broken)
		assert.NotEmpty(t, broken.Problems(), name)
	}
}

func TestServableHaveTasks(t *testing.T) {
	ids := map[string]bool{}
	for _, cp := range models.Servable() {
		ids[cp.ID] = true
	}
	assert.Equal(t, map[string]bool{"ref-t2v": true, "ref-edit": true, "ref-t2i": true, "Wan-AI/Wan2.1-T2V-1.3B": true, "Wan-AI/Wan2.2-TI2V-5B": true, "MiniMaxAI/MiniMax-H3": true, "Qwen/Qwen-Image-Edit-2511": true}, ids)
	_, err := models.Lookup("nope")
	assert.ErrorContains(t, err, "unknown checkpoint")
}
