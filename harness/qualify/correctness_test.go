package qualify

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/fixtures"
	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Without a native path here, a GPU row's served outputs are held to the bundle's reference
// outputs when it carries them (a server whose pipeline is broken, halved steps or an ignored
// prompt, gives other pictures than the reference), and without either the correctness stage
// says that nothing holds them. Shown failing by comparing reference outputs on the native
// path only, as before: the served output unlike its reference passed.
func TestServedOutputsHeldToReferenceOutputs(t *testing.T) {
	e := lookup(t, "Qwen/Qwen-Image-Edit-2511")
	e.Defaults.Size = spec.Size{W: 64, H: 48} // small pictures: the comparison, not its cost
	dir := fakeBundle(t, e, e.Revision)
	fetch := func() (*caseRun, string, error) {
		row := NewRow(e)
		row.Counts = map[string]int{}
		cfg := Defaults()
		cfg.Target.Endpoint = "http://endpoint.invalid"
		c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row, Dir: t.TempDir(), ctx: t.Context()}
		items, err := c.items()
		require.NoError(t, err)
		d := e.Defaults
		actual := &api.Actual{Width: d.Size.W, Height: d.Size.H, Steps: d.Steps, Guidance: d.Guidance, Seed: d.Seed}
		r := aiperfRequest{item: items[0], RequestID: "r1", JobID: "edit_1", raw: editRecord(t, d.Size.W, d.Size.H, actual), actual: actual}
		_, msg, err := c.fetchArtifacts(&serving{External: true}, nil, aiperfRun{Requests: []aiperfRequest{r}})
		return c, msg, err
	}
	row0 := NewRow(e)
	items, err := (&caseRun{Entry: e, Row: &row0}).items()
	require.NoError(t, err)
	key := items[0].key

	c, msg, err := fetch()
	require.NoError(t, err)
	assert.NotContains(t, msg, "reference outputs")
	_, _, err = c.correctness(bundleFacts{})
	assert.ErrorContains(t, err, "no reference outputs here", "correctness without a native path or reference outputs says nothing holds the outputs")

	// The served output as its reference: compared, and passed.
	served, err := check.EditResponse(editRecord(t, e.Defaults.Size.W, e.Defaults.Size.H, nil))
	require.NoError(t, err)
	refs := filepath.Join(dir, spec.ReferenceOutputsDir)
	require.NoError(t, os.MkdirAll(refs, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(refs, key+".png"), served, 0o644))
	c, msg, err = fetch()
	require.NoError(t, err)
	assert.Contains(t, msg, "served 1 outputs match the bundle's reference outputs")
	assert.InDelta(t, 1.0, c.Row.ReferenceSSIM[key], 1e-9)
	_, _, err = c.correctness(bundleFacts{})
	assert.ErrorContains(t, err, "held to the bundle's reference outputs in the artifacts stage")

	// Another picture as its reference: the served output fails it.
	other, err := fixtures.Image(items[0].image, e.Defaults.Size.W, e.Defaults.Size.H)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(refs, key+".png"), other, 0o644))
	_, _, err = fetch()
	assert.Equal(t, []string{"reference-output"}, check.Names(err), "%v", err)
	checktest.Failed(t, err, "reference-output")
}
