package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// On a machine without bundles the default model set is the reference families, and each GPU
// row left out is named with its missing bundle; a present bundle brings its row in.
func TestDefaultServesWhatCanLoadHere(t *testing.T) {
	t.Setenv("MEDIAQUAL_BUNDLES", "")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ids := func(cps []spec.Checkpoint) []string {
		var out []string
		for _, cp := range cps {
			out = append(out, cp.ID)
		}
		return out
	}
	// What can load here, derived from the inventory so that adding a row needs no edit here
	// (issue #28): the in-process rows, and the worker rows whose bundle is present.
	canLoad := func(present string) []string {
		var out []string
		for _, cp := range models.Servable() {
			e, err := models.Lookup(cp.ID)
			require.NoError(t, err)
			if cp.NewTask != nil || (present != "" && e.Bundle == present) {
				out = append(out, cp.ID)
			}
		}
		return out
	}
	cps, err := selectModels(nil, log)
	require.NoError(t, err)
	assert.Equal(t, canLoad(""), ids(cps))
	assert.Subset(t, ids(cps), []string{"ref-t2v", "ref-edit", "ref-t2i"})
	for _, cp := range models.Servable() {
		if cp.NewTask == nil {
			assert.Contains(t, logs.String(), "model="+cp.ID, "a left-out row is named")
		}
	}
	assert.Contains(t, logs.String(), "set MEDIAQUAL_BUNDLES")

	root := t.TempDir()
	wan, err := models.Lookup("Wan-AI/Wan2.1-T2V-1.3B")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, wan.Bundle), 0o755))
	t.Setenv("MEDIAQUAL_BUNDLES", root)
	logs.Reset()
	cps, err = selectModels(nil, log)
	require.NoError(t, err)
	assert.Equal(t, canLoad(wan.Bundle), ids(cps))
	assert.Contains(t, ids(cps), wan.ID)
	assert.Contains(t, logs.String(), filepath.Join(root, "Qwen/Qwen-Image-Edit-2511"), "the missing bundle's path")
}

// A worker that never says ready fails its load naming the timeout and how to raise it.
func TestLoadTimeoutSaysHowToRaiseIt(t *testing.T) {
	cp := spec.Checkpoint{ID: "Wan-AI/Wan2.1-T2V-1.3B", Worker: []string{"sleep", "30"}}
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	m, err := buildModel(cp, "", "", log, 200*time.Millisecond, 1)
	require.NoError(t, err)
	err = loadAll(context.Background(), []server.Model{m}, 200*time.Millisecond)
	closeAll([]server.Model{m})
	require.Error(t, err)
	for _, want := range []string{"worker_load_timeout", "load timeout 200ms (from -load-timeout)", "MEDIAQUAL_LOAD_TIMEOUT=400ms"} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestLaneDevices: the visible GPUs split into one group per lane of a Task's GPUs.
func TestLaneDevices(t *testing.T) {
	for _, tc := range []struct {
		visible        string
		perTask, lanes int
		want           []string
	}{
		{"", 1, 0, []string{""}},
		{"0", 1, 0, []string{"0"}},
		{"0,1,2,3", 1, 0, []string{"0", "1", "2", "3"}},
		{"0,1,2,3", 2, 0, []string{"0,1", "2,3"}},
		{"0,1,2", 2, 0, []string{"0,1"}},
		{"4,5,6,7", 1, 2, []string{"4", "5"}},
	} {
		got, err := laneDevices("row", tc.visible, tc.perTask, tc.lanes)
		require.NoError(t, err, tc.visible)
		assert.Equal(t, tc.want, got, "%q, %d a Task, lanes %d", tc.visible, tc.perTask, tc.lanes)
	}
	_, err := laneDevices("row", "0", 4, 0)
	assert.ErrorContains(t, err, "row needs 4 GPUs a Task; CUDA_VISIBLE_DEVICES=0 names 1")
}

// TestInProcessLanes: -lanes N builds N Tasks of an in-process row.
func TestInProcessLanes(t *testing.T) {
	cp, err := models.Lookup("ref-t2v")
	require.NoError(t, err)
	m, err := buildModel(cp.Checkpoint, "", "", slog.New(slog.DiscardHandler), time.Minute, 3)
	require.NoError(t, err)
	assert.Len(t, m.Tasks(), 3)
}

// A row with an engine choice runs its worker with --engine (the row's, or -engine's); a row
// without one refuses -engine.
func TestEngineReachesTheWorker(t *testing.T) {
	wan, err := models.Lookup("Wan-AI/Wan2.1-T2V-1.3B")
	require.NoError(t, err)
	require.NotEmpty(t, wan.Engine)
	argv := workerArgv(wan.Checkpoint)
	assert.Equal(t, []string{"--engine", wan.Engine}, argv[len(argv)-4:len(argv)-2])
	for id, engine := range map[string]string{"Wan-AI/Wan2.1-T2V-1.3B": "eager", "Qwen/Qwen-Image-Edit-2511": "regional-compile"} {
		e, err := models.Lookup(id)
		require.NoError(t, err)
		cp, err := withEngine(e.Checkpoint, engine)
		require.NoError(t, err)
		argv = workerArgv(cp)
		assert.Equal(t, []string{"--engine", engine}, argv[len(argv)-4:len(argv)-2], id)
	}

	minimax, err := models.Lookup("MiniMaxAI/MiniMax-H3")
	require.NoError(t, err)
	assert.NotContains(t, workerArgv(minimax.Checkpoint), "--engine")
	_, err = withEngine(minimax.Checkpoint, "regional-compile")
	assert.ErrorContains(t, err, "has no engine choice")
}

// A row with layouts runs the one chosen (withLayout, spec.ChooseLayout) in lanes of its
// degree, and its worker is told it with --layout after --engine; a row without layouts
// passes none and refuses -layout.
func TestLayoutReachesTheWorker(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	wan, err := models.Lookup("Wan-AI/Wan2.1-T2V-1.3B")
	require.NoError(t, err)

	t.Setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
	m, err := buildModel(wan.Checkpoint, "", "cfg-2", log, time.Minute, 0)
	require.NoError(t, err)
	assert.Equal(t, spec.Layout("cfg-2"), m.Checkpoint.Layout)
	assert.Equal(t, []string{"0,1", "2,3"}, m.Devices, "4 GPUs in lanes of cfg-2's 2")
	assert.Len(t, m.Tasks(), 2)
	argv := workerArgv(m.Checkpoint)
	assert.Equal(t, []string{"--engine", wan.Engine, "--layout", "cfg-2"}, argv[len(argv)-4:])

	// No -layout: the row's first that fits, here Wan2.1's single, one lane a GPU.
	m, err = buildModel(wan.Checkpoint, "", "", log, time.Minute, 0)
	require.NoError(t, err)
	assert.Equal(t, spec.Layout("single"), m.Checkpoint.Layout)
	assert.Equal(t, []string{"0", "1", "2", "3"}, m.Devices)
	argv = workerArgv(m.Checkpoint)
	assert.Equal(t, []string{"--layout", "single"}, argv[len(argv)-2:])

	// MiniMax-H3 prefers ulysses-4: one lane on all four; on two GPUs, ulysses-2.
	mm, err := models.Lookup("MiniMaxAI/MiniMax-H3")
	require.NoError(t, err)
	m, err = buildModel(mm.Checkpoint, "", "", log, time.Minute, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"0,1,2,3"}, m.Devices)
	assert.Contains(t, strings.Join(workerArgv(m.Checkpoint), " "), "--layout ulysses-4")
	t.Setenv("CUDA_VISIBLE_DEVICES", "6,7")
	m, err = buildModel(mm.Checkpoint, "", "", log, time.Minute, 0)
	require.NoError(t, err)
	assert.Equal(t, spec.Layout("ulysses-2"), m.Checkpoint.Layout)
	assert.Equal(t, []string{"6,7"}, m.Devices)

	_, err = buildModel(wan.Checkpoint, "", "ulysses-4", log, time.Minute, 0)
	assert.EqualError(t, err, "Wan-AI/Wan2.1-T2V-1.3B does not offer layout ulysses-4; its layouts: single, cfg-2, ulysses-2")

	ref, err := models.Lookup("ref-t2v")
	require.NoError(t, err)
	_, err = buildModel(ref.Checkpoint, "", "single", log, time.Minute, 0)
	assert.EqualError(t, err, "ref-t2v has no layout choice; layout single cannot apply")
	qwen, err := models.Lookup("Qwen/Qwen-Image-Edit-2511")
	require.NoError(t, err)
	noChoice := qwen.Checkpoint
	noChoice.Layouts = nil
	assert.NotContains(t, workerArgv(noChoice), "--layout")
}
