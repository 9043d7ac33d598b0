package qualify_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/launch"
	"github.com/mediaqual/mediaqual/harness/qualify"
	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/reports"
)

// TestQualifyAnEndpointStartedByHand starts mediaserve as an ordinary process, as a user runs
// their server, and qualifies ref-t2v and ref-edit through it as an external endpoint, the
// way MEDIAQUAL_ENDPOINT does. The native path (this build's `mediaserve task`) is available,
// so identity is compared; without a mediaserve binary, the suite runs the reference family's
// Task itself (its native path in-process) and identity compares the decoded frames. The
// server is left running by the suite, and results.md names the endpoint as external.
func TestQualifyAnEndpointStartedByHand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and serves mediaserve and runs AIPerf")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "mediaserve")
	require.NoError(t, launch.BuildMediaserve(root, bin))

	port, err := launch.FreePort()
	require.NoError(t, err)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	srv := exec.Command(bin, "-port", fmt.Sprint(port), "-model", "ref-t2v", "-model", "ref-edit",
		"-artifact-dir", t.TempDir(), "-ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
	srv.Env = append(os.Environ(), "MEDIAQUAL_ROOT="+root)
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	api := &client.Client{BaseURL: url}
	require.Eventually(t, func() bool { return api.Ready(context.Background()) == nil }, time.Minute, 50*time.Millisecond)

	// The configuration MEDIAQUAL_ENDPOINT=url gives, passed in code.
	t.Setenv(qualify.EnvEndpoint, url)
	cfg, err := qualify.FromEnv(root, bin)
	require.NoError(t, err)
	require.True(t, cfg.Target.External())
	cfg.Lookup, cfg.ReportDir = models.Lookup, t.TempDir()

	var rows []reports.Row
	for _, id := range []string{"ref-t2v", "ref-edit"} {
		e, err := models.Lookup(id)
		require.NoError(t, err)
		t.Run(id, func(t *testing.T) { rows = append(rows, qualify.Run(t, e, cfg)) })
	}
	// Without a mediaserve binary here, the native path runs in-process: everything passes,
	// identity on the decoded frames, and says so.
	noNative := cfg
	noNative.Mediaserve, noNative.ReportDir = "", ""
	e, _ := models.Lookup("ref-edit")
	var bare reports.Row
	t.Run("ref-edit-no-native-path", func(t *testing.T) { bare = qualify.Run(t, e, noNative) })

	require.NoError(t, api.Ready(context.Background()), "cleanup does not stop an endpoint")
	for _, row := range rows {
		assert.Equal(t, reports.Passed, row.Outcome, row.Checkpoint)
		assert.Empty(t, row.Findings, "mediaserve follows its own contract")
		for _, s := range row.Stages {
			assert.True(t, s.Passed, "%s %s: %s", row.Checkpoint, s.Name, s.Message)
		}
		require.NotNil(t, row.Timing, row.Checkpoint)
		assert.Positive(t, row.Timing.TaskP50MS, "the endpoint's Task time is used")
	}
	assert.Equal(t, reports.Passed, bare.Outcome)
	for _, s := range bare.Stages {
		assert.True(t, s.Passed, "%s: %s", s.Name, s.Message)
		switch s.Name {
		case "correctness":
			assert.Contains(t, s.Message, "computed by the suite itself")
		case "identity":
			assert.Contains(t, s.Message, "decode to the frames of the suite's own native path")
		}
	}

	paths, err := reports.WriteFiles(cfg.ReportDir, reports.Report{Generated: time.Now(), Rows: rows, Inventory: models.Inventory()})
	require.NoError(t, err)
	md, err := os.ReadFile(paths[1])
	require.NoError(t, err)
	assert.Contains(t, string(md), url+" (external endpoint (mediaserve wire profile), not launched by the suite)")
	assert.True(t, strings.HasSuffix(paths[1], "results.md"))
}
