package qualify

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/models/spec"
)

func ptr(v float64) *float64 { return &v }

// figures that pass: a compiled engine within its bounds.
func passing() *spec.Parity {
	near, cond, lat := 0.09, 0.01, 0.3
	return &spec.Parity{Reference: "eager, one device, before layout and engine", Served: "engine regional-compile-fused, layout single",
		RelL2: &near, CondRelL2: &cond, MaxAbs: &lat, UncondRelL2: ptr(0.012),
		FP32Reference: 0.073, FP32Served: 0.069, Bound: 0.146, Ceiling: 0.15,
		CondFP32Reference: 0.02, CondFP32Served: 0.019, CondBound: 0.04, CondCeiling: 0.06,
		UncondFP32Reference: ptr(0.021), UncondFP32Served: ptr(0.02), UncondBound: ptr(0.042), UncondCeiling: ptr(0.06),
		MaxAbsFP32Reference: 0.2, MaxAbsFP32Served: 0.25, MaxAbsBound: 0.8, Passed: true}
}

var (
	compiled = parityServed{Engine: "regional-compile-fused", Layout: "ulysses-2", Branches: true}
	eager    = parityServed{Engine: "eager", Branches: true}
)

// The serve stage reads the worker's verdict and its figures: a refusal, or figures that
// contradict a pass, fail parity by name, with engine, layout and figures; a launch the worker
// ended for parity fails parity, not launch.
func TestParityIsReadFromTheFigures(t *testing.T) {
	require.NoError(t, checkParity(passing(), parityServed{Engine: "regional-compile-fused", Branches: true}))
	require.NoError(t, checkParity(nil, parityServed{}), "nothing to hold: the caller judges a missing check (TestParityMustBeReported)")

	ref := passing()
	ref.Served, ref.RelL2, ref.CondRelL2, ref.UncondRelL2, ref.MaxAbs = spec.IsReference, nil, nil, nil, nil
	ref.FP32Served, ref.CondFP32Served, ref.UncondFP32Served = ref.FP32Reference, ref.CondFP32Reference, ref.UncondFP32Reference
	require.NoError(t, checkParity(ref, eager), "eager on one device is the reference")
	require.NoError(t, checkParity(ref, parityServed{Layout: "single", Branches: true}), "a family with no engine to choose runs eager")
	for _, r := range []parityServed{{Engine: "regional-compile", Branches: true}, {Engine: "eager", Layout: "cfg-2", Branches: true}} {
		err := checkParity(ref, r)
		checktest.Failed(t, err, "parity")
		assert.ErrorContains(t, err, `served "is the reference" under `+r.String()+": only eager on one device is the reference")
	}
	distilled := passing()
	distilled.UncondRelL2, distilled.UncondFP32Reference, distilled.UncondFP32Served, distilled.UncondBound, distilled.UncondCeiling = nil, nil, nil, nil, nil
	require.NoError(t, checkParity(distilled, parityServed{Engine: "regional-compile-fused"}), "one transformer call a step: no unconditional prediction")
	assert.NotContains(t, distilled.String(), "uncond")
	assert.Contains(t, passing().String(), "cond 0.01, uncond 0.012, guided 0.09")
	assert.Contains(t, passing().String(), "uncond 0.02 (0.021) / 0.042")

	for name, c := range map[string]struct {
		change func(p *spec.Parity)
		want   string
	}{
		"refused": {func(p *spec.Parity) {
			p.Passed, p.CondFP32Served, p.Failed = false, 0.1, []string{"its cond prediction is 0.1 from fp32"}
		}, "engine regional-compile-fused, layout ulysses-2 refused by the worker's parity check: its cond prediction is 0.1 from fp32"},
		"over its bound":  {func(p *spec.Parity) { p.CondFP32Served = 0.041 }, "the cond prediction is 0.041 from fp32, over its bound 0.04"},
		"a widened bound": {func(p *spec.Parity) { p.Bound = 0.3 }, "the guided bound 0.3 is wider than 2 x its floor 0.073"},
		"a broken reference": {func(p *spec.Parity) {
			p.CondFP32Reference, p.CondBound, p.CondFP32Served = 0.5, 1, 0.6
		}, "the cond floor 0.5 (ceiling 0.06) is over the ceiling 0.06"},
		"a raised ceiling":  {func(p *spec.Parity) { p.Ceiling = 0.5 }, "the guided floor 0.073 (ceiling 0.5) is over the ceiling 0.15"},
		"no floor":          {func(p *spec.Parity) { p.CondFP32Reference = 0 }, "the cond floor 0 is not a measured distance"},
		"latents":           {func(p *spec.Parity) { p.MaxAbsFP32Served = 0.9 }, "the latents are up to 0.9 from fp32's, over their bound 0.8"},
		"a branch lost":     {func(p *spec.Parity) { p.UncondFP32Served = ptr(1) }, "the uncond prediction is 1 from fp32, over its bound 0.042"},
		"uncond widened":    {func(p *spec.Parity) { p.UncondBound = ptr(0.1) }, "the uncond bound 0.1 is wider than 2 x its floor 0.021"},
		"uncond ceiling":    {func(p *spec.Parity) { p.UncondCeiling = ptr(0.5) }, "the uncond floor 0.021 (ceiling 0.5) is over the ceiling 0.06"},
		"uncond left out":   {func(p *spec.Parity) { p.UncondFP32Served = nil }, "the uncond prediction is not measured, where the row's step runs two guidance branches"},
		"latents' bound":    {func(p *spec.Parity) { p.MaxAbsBound = 2 }, "the latents' bound 2 is wider than 4 x their floor 0.2"},
		"a zero for itself": {func(p *spec.Parity) { p.Served = spec.IsReference }, `served "is the reference" with figures against eager of another runtime`},
	} {
		t.Run(name, func(t *testing.T) {
			p := passing()
			c.change(p)
			err := checkParity(p, compiled)
			require.Error(t, err)
			checktest.Failed(t, err, "parity")
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "engine regional-compile-fused, layout ulysses-2")
			assert.Contains(t, err.Error(), "to fp32, served (eager bf16) / bound: cond ", "the figures")
		})
	}

	err := launchFailure(errors.New("server exited before ready: exit 1\nqwenimage-adapter: fatal: parity: engine regional-compile-fused, layout single (fault rope-shifted) differs from eager on one device: its cond prediction ..."))
	checktest.Failed(t, err, "parity")
	assert.Equal(t, []string{"parity"}, check.Names(err), "parity alone, not launch as well")
	assert.Contains(t, err.Error(), "fault rope-shifted")
	assert.Equal(t, []string{"launch"}, check.Names(launchFailure(errors.New("server not ready after 5m0s"))))
}

// A GPU row's worker the suite launched must report parity it checked: a ready line with no
// parity, or one marked not checked, fails parity (before, both passed). An endpoint that
// reports none is a limit on the row, named; a row with no GPU has nothing to hold.
func TestParityMustBeReported(t *testing.T) {
	gpu, cpu := lookup(t, "Qwen/Qwen-Image-Edit-2511"), lookup(t, "ref-t2v")
	run := func(e spec.Entry, p *spec.Parity, external bool) (*caseRun, error) {
		row := NewRow(e)
		row.Parity = p
		c := &caseRun{T: t, Entry: e, Config: Defaults(), Row: &row, ctx: t.Context()}
		return c, c.parity(&serving{External: external}, parityServed{Engine: e.Engine, Branches: true})
	}
	for _, p := range []*spec.Parity{nil, {NotChecked: "no step callback"}} {
		_, err := run(gpu, p, false)
		checktest.Failed(t, err, "parity")
		assert.ErrorContains(t, err, "the launched worker's ready line carries "+parityMissing(p))

		c, err := run(gpu, p, true)
		require.NoError(t, err, "an endpoint")
		require.Len(t, c.Row.Limits, 1)
		assert.Equal(t, spec.FamilyValidated, c.Row.Limits[0].Ceiling)
		assert.Contains(t, c.Row.Limits[0].Why, "parity: not reported (the endpoint's /v1/models carries "+parityMissing(p))

		c, err = run(cpu, p, false)
		require.NoError(t, err, "no GPU: nothing to hold")
		assert.Empty(t, c.Row.Limits)
	}
	_, err := run(gpu, passing(), false)
	require.NoError(t, err)
}
