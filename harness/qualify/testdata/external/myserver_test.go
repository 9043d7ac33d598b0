package myserver_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/mediaqual/mediaqual/harness/qualify"
	"github.com/mediaqual/mediaqual/models/reference"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
	"github.com/mediaqual/mediaqual/server"
)

// myRow is this module's own row: mediaqual's reference text-to-video family under an id of
// its own, pinned to a smaller clip than mediaqual's ref-t2v.
func myRow() spec.Entry {
	e := reference.Entries()[0] // ref-t2v
	e.ID = "my-org/tiny-t2v"
	e.Defaults.Size, e.Defaults.NumFrames, e.Defaults.FPS = spec.Size{W: 160, H: 96}, 9, 8
	e.Goldens = "" // mediaqual's goldens are for its own rows
	return e
}

// startMyServer is this module's own target: a server serving e, here mediaserve's server
// package in process; any server speaking docs/API.md will do.
func startMyServer(t *testing.T, e spec.Entry) string {
	task, err := e.NewTask()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{ArtifactDir: t.TempDir(),
		Models: []server.Model{{Checkpoint: e.Checkpoint, Task: task, Runtime: "in-process"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); _ = srv.Close() })
	return hs.URL
}

func TestMyServer(t *testing.T) {
	e := myRow()
	cfg := qualify.Defaults()
	cfg.Root = "."                            // AIPerf: ./.cache, else mediaqual's shared cache
	cfg.Target.Endpoint = startMyServer(t, e) // an endpoint: nothing is launched or stopped
	cfg.Warmup, cfg.Measured = 0, 1           // a quick run; never aiperf-qualified
	row := qualify.Run(t, e, cfg)             // Config.Lookup nil: the server serves e alone

	t.Logf("%s: %s; limits: %v; findings: %v", e.ID, row.Outcome, row.Limits, row.Findings)
	if row.Outcome != reports.Passed {
		t.Errorf("outcome %s, want passed", row.Outcome)
	}
	var names []string
	for _, s := range row.Stages {
		names = append(names, s.Name)
		// No mediaserve here (cfg.Mediaserve is empty), but the row's Task is Go code: the suite
		// runs it itself as the native path, and identity holds the served frames to it.
		if s.Name == qualify.StageIdentity && !s.Passed {
			t.Errorf("identity did not pass against the suite's own native path: %s", s.Message)
		}
	}
	if want := qualify.Stages(e); !slices.Equal(names, want) {
		t.Errorf("stages %v, want %v", names, want)
	}
}
