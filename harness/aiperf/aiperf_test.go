package aiperf_test

import (
	"context"
	"image"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/fixtures"
	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/ledger"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// flakyTask fails jobs whose prompt says "fail", never finishes those that say "hang", and
// renders the rest.
type flakyTask struct{}

func (flakyTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	switch {
	case strings.Contains(req.Prompt, "fail"):
		return spec.Output{}, &spec.Error{Code: "task_failed", Message: "injected failure"}
	case strings.Contains(req.Prompt, "hang"):
		<-ctx.Done()
		return spec.Output{}, ctx.Err()
	}
	out := spec.Output{Actual: spec.Actual{NumFrames: req.NumFrames, Width: req.Size.W, Height: req.Size.H, FPS: req.FPS,
		DurationS: float64(req.NumFrames) / float64(req.FPS), Steps: req.Steps, Guidance: req.Guidance, Seed: req.Seed, Precision: "fp32"},
		TaskWall: time.Millisecond}
	for i := range req.NumFrames {
		f := image.NewRGBA(image.Rect(0, 0, req.Size.W, req.Size.H))
		for p := range f.Pix {
			f.Pix[p] = uint8(p*i + 1)
		}
		out.Frames = append(out.Frames, f)
	}
	return out, nil
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for ; dir != "/"; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
	}
	t.Fatal("no go.mod above the test")
	return ""
}

// TestFailedAndUnfinishedJobsAreNamed runs the real AIPerf against a server that fails one job
// and never finishes another: both are recorded by request id and the verdict names them.
func TestFailedAndUnfinishedJobsAreNamed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// AIPerf itself writes into TMPDIR (its IPC socket directories): nothing may be left there.
	// A short one: the socket paths must fit in 107 bytes, which t.TempDir's would not.
	sysTmp, err := os.MkdirTemp("", "tmp-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(sysTmp) })
	t.Setenv("TMPDIR", sysTmp)
	env, err := aiperf.Ensure(ctx, aiperf.DefaultVenv(moduleRoot(t)), nil)
	require.NoError(t, err)
	require.Equal(t, aiperf.Version, env.Version)

	ledgerPath := filepath.Join(dir, "ledger.jsonl")
	lf, err := os.Create(ledgerPath)
	require.NoError(t, err)
	defer lf.Close()
	cp := spec.Checkpoint{ID: "flaky", Family: "test", Profile: "test", Revision: "t", Precision: "fp32",
		Capabilities: []spec.Capability{spec.TextToVideo},
		Controls: spec.Controls{Sizes: []spec.Size{{W: 32, H: 32}}, Frames: &spec.FrameRule{Step: 4, Offset: 1, Range: spec.IntRange{Min: 1, Max: 9}},
			FPS: []int{8}, Steps: spec.IntRange{Min: 1, Max: 4}, Guidance: spec.FloatRange{Min: 0, Max: 5}, GuidanceParam: "guidance_scale"},
		Defaults: spec.Settings{Size: spec.Size{W: 32, H: 32}, NumFrames: 5, FPS: 8, Steps: 1, Guidance: 1, Seed: 1}}
	// The server's artifact URLs are absolute at its PublicURL, which is the test server's.
	var handler http.Handler
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	srv, err := server.New(server.Config{Models: []server.Model{{Checkpoint: cp, Task: flakyTask{}}}, ArtifactDir: filepath.Join(dir, "art"), Ledger: lf, PublicURL: hs.URL})
	require.NoError(t, err)
	require.NoError(t, srv.Load(ctx))
	handler = srv.Handler()
	defer func() { hs.Close(); srv.Close() }()

	prompts := filepath.Join(dir, "prompts.jsonl")
	require.NoError(t, os.WriteFile(prompts, []byte(`{"text": "a good clip"}
{"text": "please fail"}
{"text": "please hang"}
`), 0o644))
	tok, err := fixtures.WriteTokenizer(filepath.Join(dir, "tokenizer"))
	require.NoError(t, err)
	run := aiperf.Run{Model: "flaky", URL: hs.URL, Endpoint: aiperf.VideoGeneration, Tokenizer: tok, InputFile: prompts,
		Extra: [][2]string{{"num_frames", "5"}}, Warmup: 0, Requests: 3, Concurrency: 1, // in file order: one lane
		ArtifactDir: filepath.Join(dir, "aiperf"), PollInterval: 50 * time.Millisecond, RequestTimeout: 3 * time.Second}
	require.NoError(t, env.Exec(ctx, run))
	left, err := os.ReadDir(sysTmp)
	require.NoError(t, err)
	assert.Empty(t, left, "AIPerf's scratch is removed from TMPDIR")

	x, err := aiperf.ReadExports(run.ArtifactDir)
	require.NoError(t, err)
	assert.Equal(t, aiperf.Version, x.Summary.Version)
	entries, err := ledger.Read(ledgerPath)
	require.NoError(t, err)
	reqs := aiperf.Join(x, entries)
	require.Len(t, reqs, 3, "every request is kept")
	by := map[string]aiperf.Request{}
	for _, q := range reqs {
		by[q.Outcome] = q
	}
	require.Contains(t, by, aiperf.Completed)
	require.Contains(t, by, aiperf.Failed)
	require.Contains(t, by, aiperf.Unfinished)
	assert.Contains(t, by[aiperf.Failed].Why, "injected failure")
	assert.NotNil(t, by[aiperf.Failed].ClientError, "the client's error is kept")
	assert.NotEmpty(t, by[aiperf.Unfinished].JobID)

	err = aiperf.Account(reqs, entries)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "2 of 3 requests not accounted as completed") // the aiperf stage names it check aiperf-accounting
	assert.Contains(t, err.Error(), by[aiperf.Failed].XRequestID)
	assert.Contains(t, err.Error(), by[aiperf.Unfinished].XRequestID)
	assert.NotContains(t, err.Error(), by[aiperf.Completed].XRequestID)
}
