package check_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/models/spec"
)

// cmp.Diff's layout is deliberately unstable, so the tests look for field names and values,
// not for its exact lines.

func TestReconcile(t *testing.T) {
	row := spec.Entry{Checkpoint: spec.Checkpoint{ID: "m-edit", Revision: "r1", Precision: "bf16", Profile: "p/L0",
		Capabilities: []spec.Capability{spec.ImageEdit}}, Workload: spec.ImageEdit}
	lookup := func(id string) (spec.Entry, error) {
		if id == row.ID {
			return row, nil
		}
		return spec.Entry{}, fmt.Errorf("no %s", id)
	}
	good := api.Model{ID: "m-edit", Capabilities: []string{"image_edit"}, Revision: "r1", Precision: "bf16", Profile: "p/L0"}
	require.NoError(t, check.Reconcile([]api.Model{good}, lookup, row))

	with := func(f func(*api.Model)) []api.Model { m := good; f(&m); return []api.Model{m} }
	for name, tc := range map[string]struct {
		served []api.Model
		msg    []string
	}{
		"unknown model":       {append(with(func(*api.Model) {}), api.Model{ID: "mystery"}), []string{"mystery is not in the inventory"}},
		"claimed capability":  {with(func(m *api.Model) { m.Capabilities = []string{"image_edit", "text_to_video"} }), []string{"declares text_to_video", "Capabilities: []string{", `"text_to_video",`}},
		"other revision":      {with(func(m *api.Model) { m.Revision = "r0" }), []string{"Revision:", `"r0"`, `"r1"`}},
		"other precision":     {with(func(m *api.Model) { m.Precision = "fp8" }), []string{`Precision:`, `"fp8"`}},
		"not served":          {nil, []string{"m-edit is not served"}},
		"capability withheld": {with(func(m *api.Model) { m.Capabilities = nil }), []string{"does not declare image_edit"}},
	} {
		err := check.Reconcile(tc.served, lookup, row)
		failsWith(t, err, "reconcile")
		for _, m := range tc.msg {
			assert.Contains(t, err.Error(), m, name)
		}
	}
}

func TestSettings(t *testing.T) {
	asked := check.WireSettings(spec.Settings{Prompt: "p", Size: spec.Size{W: 320, H: 192}, NumFrames: 17, FPS: 16, Steps: 4, Guidance: 5, Seed: 42})
	actual := api.Actual{NumFrames: 17, Width: 320, Height: 192, FPS: 16, DurationS: 1.0625, Steps: 4, Guidance: 5, Seed: 42, Precision: "fp32"}
	require.NoError(t, check.Settings(asked, actual))

	for name, tc := range map[string]struct {
		broken func(*api.Actual)
		msg    string
	}{
		"seed ignored":      {func(a *api.Actual) { a.Seed = 0 }, "Seed:"},
		"frames changed":    {func(a *api.Actual) { a.NumFrames = 16 }, "NumFrames"},
		"size changed":      {func(a *api.Actual) { a.Width = 832 }, `"832x192"`},
		"steps echoed zero": {func(a *api.Actual) { a.Steps = 0 }, "Steps"},
		"nan guidance":      {func(a *api.Actual) { a.Guidance = math.NaN() }, "NaN"},
	} {
		a := actual
		tc.broken(&a)
		err := check.Settings(asked, a)
		failsWith(t, err, "actual-settings")
		assert.Contains(t, err.Error(), tc.msg, name)
	}
	nan := asked
	nan.Guidance = math.NaN()
	a := actual
	a.Guidance = math.NaN()
	failsWith(t, check.Settings(nan, a), "actual-settings") // NaN asked and NaN reported is not agreement
}
