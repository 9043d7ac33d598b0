package wan

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
	"github.com/mediaqual/mediaqual/models/spec"
	serverworker "github.com/mediaqual/mediaqual/server/worker"
)

// TestFramesStreamFromTheRealAdapter runs the Python and Go halves of frame streaming
// together: the real Wan adapter on a tiny L0 bundle (CPU, the torch virtualenv) behind
// server/worker, which hands each run of frames the adapter announces to Request.Frames
// before the Task returns. The runs are Wan's VAE chunks (1 frame, then 4), they are the
// output's own first bytes, and the whole clip is the one a run without a sink gives.
func TestFramesStreamFromTheRealAdapter(t *testing.T) {
	py := pytest.TorchPython(t)
	bundles, dir := tinyBundles(t, py), t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "worker.log"))
	require.NoError(t, err)
	t.Cleanup(func() { logFile.Close() })
	logged := func() string { b, _ := os.ReadFile(logFile.Name()); return string(b) }
	task := serverworker.New(serverworker.Config{
		Argv: []string{py, "adapter.py", "--bundle", filepath.Join(bundles, "Wan-AI", "Wan2.1-T2V-1.3B-Diffusers"),
			"--flow-shift", "3.0", "--device", "cpu"},
		Log: logFile, LoadTimeout: 2 * time.Minute, ScratchDir: filepath.Join(dir, "scratch"),
	})
	t.Cleanup(func() { _ = task.Close() })
	ctx := context.Background()
	require.NoError(t, task.Load(ctx), logged())

	settings := spec.Settings{Prompt: "a fox", Size: spec.Size{W: 64, H: 48}, NumFrames: 9, FPS: 16, Steps: 2, Guidance: 5, Seed: 42}
	var runs [][]byte
	streamed, err := task.Run(ctx, spec.Request{Settings: settings, Frames: func(pix []byte) { runs = append(runs, pix) }})
	require.NoError(t, err, logged())
	v, err := streamed.Pixels()
	require.NoError(t, err)

	frame := 64 * 48 * 3
	var sizes []int
	for _, r := range runs {
		sizes = append(sizes, len(r)/frame)
	}
	assert.Equal(t, []int{1, 4, 4}, sizes, "one run per VAE chunk")
	require.Len(t, v.Pix, 9*frame)
	assert.Equal(t, bytes.Join(runs, nil), v.Pix, "the runs are the clip")
	if len(runs) > 0 {
		assert.Same(t, &v.Pix[0], &runs[0][0], "the runs are slices of the returned buffer")
	}

	whole, err := task.Run(ctx, spec.Request{Settings: settings})
	require.NoError(t, err)
	w, err := whole.Pixels()
	require.NoError(t, err)
	assert.Equal(t, w.Pix, v.Pix, "streaming changes no byte")
	require.NoError(t, task.Close(), "Close waits for the jobs' scratch files to go")
	entries, err := os.ReadDir(filepath.Join(dir, "scratch"))
	require.NoError(t, err)
	assert.Empty(t, entries, "no raw frame file is left behind")
}
