package pyworker

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/internal/proctest"
	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server/worker"
)

// The ranks' own tests (test_ranks.py): protocol, cancel, crashes and load failures of a
// 2-rank group over gloo, and a tiny real WanPipeline under cfg-2 and ulysses-2. Its classes
// run side by side, and beside TestRankedWorkerBehindTheServer: each starts its own groups.
func TestRanksPythonUnitTests(t *testing.T) {
	t.Parallel()
	pytest.UnitTestClassesWith(t, pytest.TorchPython(t), "test_ranks")
}

// The server side of a 2-rank worker: a job, a crash of rank 1 reported as worker_crashed and
// the whole group restarted for the next job, and a cancel that leaves the group serving.
func TestRankedWorkerBehindTheServer(t *testing.T) {
	t.Parallel()
	var log proctest.Buffer
	task := worker.New(worker.Config{
		Argv: []string{pytest.TorchPython(t), filepath.Join("testdata", "ranked_worker.py"), "--layout", "ulysses-2"},
		Log:  &log, LoadTimeout: 3 * time.Minute, // two ranks importing torch beside the other packages' tests
	})
	t.Cleanup(func() { _ = task.Close() })
	ctx := context.Background()
	require.NoError(t, task.Load(ctx))
	settings := spec.Settings{Prompt: "a fox", Size: spec.Size{W: 4, H: 2}, NumFrames: 2, FPS: 8, Steps: 3, Guidance: 1, Seed: 1}
	run := func(ctx context.Context, prompt string) (spec.Output, error) {
		s := settings
		s.Prompt = prompt
		return task.Run(ctx, spec.Request{Settings: s})
	}

	out, err := run(ctx, "a fox")
	require.NoError(t, err)
	v, err := out.Pixels()
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{9}, 2*4*2*3), v.Pix, "(1+2) per step over 3 steps: both ranks took part")
	assert.Equal(t, "ulysses-2", out.Actual.Layout)

	_, err = run(ctx, "crash rank 1")
	var se *spec.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, worker.CodeCrashed, se.Code)
	assert.Regexp(t, `rank 1 .*exited with status 7`, se.Message, "the crash message names the dead rank")

	out, err = run(ctx, "after the crash")
	require.NoError(t, err, "the group was restarted whole")
	assert.Equal(t, 1, task.Restarts())
	assert.Equal(t, 2, out.Actual.NumFrames)

	cctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	s := settings
	s.Prompt, s.Steps = "slow", 50
	_, err = task.Run(cctx, spec.Request{Settings: s})
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
	_, err = run(ctx, "after the cancel")
	require.NoError(t, err)
	assert.Equal(t, 1, task.Restarts(), "a cancel does not cost a restart")
	assert.Regexp(t, `rank 1\]: rank 1 stopped at step \d+`, log.String(), "the cancel reached rank 1")
}
