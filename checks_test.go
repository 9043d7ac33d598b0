package mediaqual_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"mediaqual/harness/client"
	"mediaqual/models"
	"mediaqual/models/spec"
	"mediaqual/server"
)

// The suite's own checks (those outside harness/check) shown failing on broken inputs.

func TestReconcileCatchesUnbackedDeclarations(t *testing.T) {
	e, err := models.Lookup("ref-edit")
	require.NoError(t, err)
	good := client.Model{ID: "ref-edit", Capabilities: []string{"image_edit"}, Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}
	require.NoError(t, reconcile([]client.Model{good}, e))

	for name, tc := range map[string]struct {
		served []client.Model
		msg    string
	}{
		"unknown model":       {[]client.Model{good, {ID: "mystery", Capabilities: []string{"image_edit"}}}, "not in the inventory"},
		"claimed capability":  {[]client.Model{{ID: "ref-edit", Capabilities: []string{"image_edit", "text_to_video"}, Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}}, "declares text_to_video"},
		"other revision":      {[]client.Model{{ID: "ref-edit", Capabilities: []string{"image_edit"}, Revision: "v0", Precision: e.Precision, Profile: e.Profile}}, "serves revision"},
		"not served":          {nil, "is not served"},
		"capability withheld": {[]client.Model{{ID: "ref-edit", Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}}, "does not declare image_edit"},
	} {
		err := reconcile(tc.served, e)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "check reconcile:", name)
		assert.Contains(t, err.Error(), tc.msg, name)
	}
}

func TestGPUPreCheckSaysWhatToSet(t *testing.T) {
	e, err := models.Lookup("Wan-AI/Wan2.1-T2V-1.3B")
	require.NoError(t, err)
	t.Setenv("MEDIAQUAL_BUNDLES", "")
	t.Setenv("MEDIAQUAL_GPUS", "0")
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MEDIAQUAL_BUNDLES")

	root := t.TempDir()
	t.Setenv("MEDIAQUAL_BUNDLES", root)
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(root, e.Bundle))

	require.NoError(t, os.MkdirAll(filepath.Join(root, e.Bundle), 0o755))
	t.Setenv("MEDIAQUAL_GPUS", "")
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MEDIAQUAL_GPUS")
}

// gatedTask holds every job until its gate closes, reporting progress as it waits.
type gatedTask struct{ gate chan struct{} }

func (g gatedTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	req.Progress(1, 4)
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return spec.Output{}, ctx.Err()
}

func TestProgressLinesDuringLongRuns(t *testing.T) {
	e, err := models.Lookup("ref-t2v")
	require.NoError(t, err)
	cp := e.Checkpoint
	gate := make(chan struct{})
	srv, err := server.New(server.Config{Models: []server.Model{{Checkpoint: cp, Task: gatedTask{gate}}}, ArtifactDir: t.TempDir()})
	require.NoError(t, err)
	require.NoError(t, srv.Load(context.Background()))
	hs := httptest.NewServer(srv.Handler())
	defer func() { close(gate); hs.Close(); srv.Close() }()
	api := &client.Client{BaseURL: hs.URL}
	v, err := api.CreateVideo(context.Background(), map[string]string{"model": cp.ID, "prompt": "slow"}, "")
	require.NoError(t, err)

	var mu sync.Mutex
	var lines []string
	q := &qualification{entry: e, ctx: context.Background(), server: &servedModel{api: api}}
	stop := q.showProgress(func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(f, a...))
	}, 20*time.Millisecond)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(lines) >= 2 }, 5*time.Second, 10*time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "progress: "+v.ID+" in_progress 25%", lines[0])
}
