package api_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/ledger"
	"github.com/mediaqual/mediaqual/internal/proctest"
	"github.com/mediaqual/mediaqual/models/reference"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// layoutTask is a reference Task that says it ran layout, as a worker told --layout does.
type layoutTask struct {
	spec.Task
	layout string
}

func (t layoutTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	out, err := t.Task.Run(ctx, req)
	out.Actual.Layout = t.layout
	return out, err
}

// TestContractLayout: the fields a model with GPU layouts adds (/v1/models layout and
// layouts, actual.layout, the ledger's layout and lane_devices) decode strictly into the
// harness's types. TestContract's reference rows offer no layouts, so they never show them.
func TestContractLayout(t *testing.T) {
	var cp spec.Checkpoint
	for _, c := range reference.Checkpoints() {
		if c.ID == "ref-t2v" {
			cp = c
		}
	}
	require.NotNil(t, cp.NewTask)
	task, err := cp.NewTask()
	require.NoError(t, err)
	cp.Layouts, cp.Layout = []spec.Layout{"single", "cfg-2"}, "cfg-2"
	led := &proctest.Buffer{}
	srv, err := server.New(server.Config{
		Models:      []server.Model{{Checkpoint: cp, Task: layoutTask{task, "cfg-2"}, Runtime: "worker", Devices: []string{"0,1"}}},
		ArtifactDir: t.TempDir(), Ledger: led,
	})
	require.NoError(t, err)
	require.NoError(t, srv.Load(context.Background()))
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	defer srv.Close()

	var models api.ModelList
	strict(t, get(t, hs.URL+"/v1/models", 200), &models)
	require.Len(t, models.Data, 1)
	assert.Equal(t, "cfg-2", models.Data[0].Layout)
	assert.Equal(t, []string{"single", "cfg-2"}, models.Data[0].Layouts)
	assert.Equal(t, []string{"0,1"}, models.Data[0].LaneDevices)

	var v api.Video
	strict(t, post(t, hs.URL+"/v1/videos", "req-layout", map[string]string{"model": "ref-t2v", "prompt": "a red ball"}, nil, 200), &v)
	id, deadline := v.ID, time.Now().Add(time.Minute)
	for !v.Terminal() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		v = api.Video{}
		strict(t, get(t, hs.URL+"/v1/videos/"+id, 200), &v)
	}
	require.Equal(t, api.StatusCompleted, v.Status, "%+v", v.Error)
	assert.Equal(t, "cfg-2", v.Actual.Layout)

	// The job's ledger line follows its completion.
	var job ledger.Entry
	require.Eventually(t, func() bool {
		for _, l := range bytes.Split(bytes.TrimSpace(led.Bytes()), []byte("\n")) {
			var en ledger.Entry
			strict(t, l, &en)
			if en.Event == "job" {
				job = en
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "cfg-2", job.Layout)
	assert.Equal(t, "0,1", job.LaneDevices)
	assert.Equal(t, "cfg-2", job.Actual.Layout)
}
