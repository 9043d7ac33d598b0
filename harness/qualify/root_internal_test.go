package qualify

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/wire"
)

// Config.Root "." in another module (as a user may write it) lacks the files mediaqual's rows
// name: refused before the row runs, saying what to set. Before, ref-t2v failed its correctness
// stage with "open models/reference/testdata/goldens.json".
func TestRootHoldsWhatTheRowNames(t *testing.T) {
	ref := lookup(t, "ref-t2v")
	require.NotEmpty(t, ref.Goldens)
	other := Config{Root: t.TempDir(), Mediaserve: "/bin/mediaserve"}
	err := other.RootHolds(ref)
	require.Error(t, err)
	assert.Contains(t, err.Error(), ref.Goldens)
	assert.Contains(t, err.Error(), "set Root to the directory `go list -m -f '{{.Dir}}' github.com/mediaqual/mediaqual` prints")

	here := Config{Root: "../..", Mediaserve: "/bin/mediaserve"}
	assert.NoError(t, here.RootHolds(ref))
	own := ref
	own.Goldens = "" // a row of one's own
	assert.NoError(t, other.RootHolds(own))
	writing := other
	writing.UpdateGoldens = true
	assert.NoError(t, writing.RootHolds(ref), "goldens being written need not exist yet")

	wan := lookup(t, "Wan-AI/Wan2.1-T2V-1.3B")
	assert.ErrorContains(t, other.RootHolds(wan), "models/wan/adapter.py", "a launched mediaserve runs the worker from Root")
	assert.NoError(t, here.RootHolds(wan))
	endpoint := other
	endpoint.Target.Endpoint = "http://gpu-host:8000"
	assert.NoError(t, endpoint.RootHolds(wan), "an endpoint runs its own worker")
}

// Where there is a native path (a mediaserve set, or a Go family's Task run in-process),
// identity's "not compared" names the correctness stage, not a missing native path. Before, a
// row whose correctness stage failed was told there was no native path.
func TestIdentityNamesWhyNoNativeOutputs(t *testing.T) {
	for _, tc := range []struct{ id, mediaserve, want string }{
		{"ref-t2v", "/bin/mediaserve", "the correctness stage established no native outputs for ref-t2v"},
		{"ref-t2v", "", "the correctness stage established no native outputs for ref-t2v"},
		{"Wan-AI/Wan2.1-T2V-1.3B", "", "no native path for Wan-AI/Wan2.1-T2V-1.3B here"},
	} {
		e := lookup(t, tc.id)
		c := &caseRun{Entry: e, ctx: context.Background(), Config: Config{Mediaserve: tc.mediaserve, Target: Target{Profile: wire.Mediaserve}}}
		_, err := c.identity(nil, artifactSet{Served: []artifact{{Path: "served.mp4"}}})
		assert.ErrorContains(t, err, tc.want)
	}
}
