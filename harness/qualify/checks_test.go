package qualify

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// The stages' own checks, each made to fail here on a fake (a doctored row, a missing bundle,
// an unreachable or failing server, an unusable AIPerf, an undecodable file) and read by
// name from the typed failure (check.Names), as the report reads it. Each test lists the
// checks it shows failing in harness/check's TestEveryCheckIsShownFailing.

// failsAt asserts that err is a check failure and that the first check it names is name.
func failsAt(t *testing.T, err error, name string) {
	t.Helper()
	require.Error(t, err, "want check %s to fail", name)
	names := check.Names(err)
	require.NotEmpty(t, names, "want a check failure, got %v", err)
	assert.Equal(t, name, names[0], "%v", err)
	checktest.Failed(t, err, name)
}

// An incomplete row fails inventory-row; a complete row with no Task fails inventory-task; a
// GPU row whose bundle is not there, or with no GPUs named, fails gpu-environment.
func TestInventoryChecksFailByName(t *testing.T) {
	e := lookup(t, "ref-t2v")
	incomplete := e
	incomplete.Family, incomplete.Fixtures = "", ""
	row := NewRow(incomplete)
	c := &caseRun{T: t, Entry: incomplete, Row: &row, Config: Defaults(), ctx: t.Context()}
	_, _, err := c.inventory()
	failsAt(t, err, "inventory-row")
	assert.ErrorContains(t, err, "no family; no fixture set")

	noTask := e
	noTask.NewTask, noTask.Worker, noTask.Status, noTask.Note = nil, nil, spec.Planned, "listed only"
	require.Empty(t, noTask.Problems(), "a planned row owes no Task")
	row = NewRow(noTask)
	c = &caseRun{T: t, Entry: noTask, Row: &row, Config: Defaults(), ctx: t.Context()}
	_, _, err = c.inventory()
	failsAt(t, err, "inventory-task")

	gpu := lookup(t, "Wan-AI/Wan2.1-T2V-1.3B")
	t.Setenv("MEDIAQUAL_BUNDLES", t.TempDir()) // no bundle there
	c = newCase(t, gpu.ID)
	_, _, err = c.inventory()
	failsAt(t, err, "gpu-environment")
	fakeBundle(t, gpu, "0123456789abcdef0123456789abcdef01234567")
	c = newCase(t, gpu.ID)
	c.Config.GPUs = ""
	_, _, err = c.inventory()
	failsAt(t, err, "gpu-environment")
	assert.ErrorContains(t, err, "set MEDIAQUAL_GPUS")
}

// An endpoint nothing listens on fails the serve stage's check endpoint (connection refused
// at once, not a deadline).
func TestUnreachableEndpointFailsEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	e := lookup(t, "ref-t2v")
	cfg := Defaults()
	cfg.Target.Endpoint = "http://" + addr
	row := NewRow(e)
	c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row, ctx: t.Context()}
	_, _, err = c.serve()
	failsAt(t, err, "endpoint")
	assert.ErrorContains(t, err, "connection refused")
}

// fakeVideos is a server that refuses to create a video (create500) or accepts the job and
// reports it failed.
func fakeVideos(t *testing.T, create500 bool) (*serving, *atomic.Int32) {
	var created atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/videos":
			created.Add(1)
			if create500 {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(`{"error":{"message":"no","type":"server_error"}}`))
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "video_1", "object": "video", "status": "queued"})
		case r.Method == http.MethodGet && r.URL.Path == "/v1/videos/video_1":
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "video_1", "object": "video", "status": "failed",
				"error": map[string]any{"code": "task_failed", "message": "the Task raised"}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return &serving{URL: srv.URL, Profile: wire.Mediaserve, API: &client.Client{BaseURL: srv.URL, PollEvery: 10 * time.Millisecond, HTTP: srv.Client(), Profile: wire.Mediaserve}}, &created
}

// The shape probe fails check shape-probe when the server refuses its request or fails its
// job (what -fault job-fails does to every job).
func TestShapeProbeFailsByName(t *testing.T) {
	for _, create500 := range []bool{true, false} {
		s, created := fakeVideos(t, create500)
		e := lookup(t, "ref-t2v")
		row := NewRow(e)
		c := &caseRun{T: t, Entry: e, Config: Defaults(), Row: &row, ctx: t.Context()}
		_, err := c.shapeProbe(s, nil)
		failsAt(t, err, "shape-probe")
		assert.Equal(t, int32(1), created.Load(), "one probe request")
		if !create500 {
			assert.ErrorContains(t, err, "ended failed")
		}
	}
}

// An AIPerf that cannot be installed fails check aiperf-install. The install is done once a
// process (aiperfOnce); the test runs it afresh against a virtualenv path under a regular
// file (so it fails at once, without reaching PyPI) and leaves it to be done afresh after.
func TestAIPerfInstallFailsByName(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	t.Setenv(aiperf.EnvVenv, filepath.Join(file, "venv"))
	aiperfOnce = sync.Once{}
	t.Cleanup(func() { aiperfOnce = sync.Once{} })
	e := lookup(t, "ref-t2v")
	row := NewRow(e)
	c := &caseRun{T: t, Entry: e, Config: Defaults(), Row: &row, ctx: t.Context()}
	_, _, err := c.aiperf(&serving{})
	failsAt(t, err, "aiperf-install")
	assert.ErrorContains(t, err, "not a directory")
}

// A served image that is not an image fails check decodable.
func TestUndecodableArtifactFailsDecodable(t *testing.T) {
	e := lookup(t, "ref-edit")
	path := filepath.Join(t.TempDir(), "out.png")
	require.NoError(t, os.WriteFile(path, []byte("not a png"), 0o644))
	c := &caseRun{T: t, Entry: e, Config: Defaults(), ctx: t.Context()}
	_, err := c.validate(path, workItem{})
	failsAt(t, err, "decodable")
}
