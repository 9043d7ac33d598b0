package qualify

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Parity's contract (docs/API.md, models/pyworker/parity.py), which the harness holds a
// server's figures to instead of taking its word: each prediction's bound is at most the
// floor factor times eager bf16's distance to fp32, the latents' at most the max-abs factor
// times, and a floor over its ceiling means the fp32 reference is broken. The factors and
// ceilings are models/spec/parity.json, which the worker reads too (spec.ParityBounds).
const (
	// slack for the figures' round trip through JSON (the worker writes Python's repr)
	paritySlack = 1e-9
)

// parityRefused is how a worker that failed its parity check says so before it exits: the
// first line of parity.ParityError, in the launch's log tail.
const parityRefused = "differs from eager on one device"

// parityServed is what the suite knows of the runtime whose parity figures it reads.
type parityServed struct {
	Engine string // the row's engine as served ("" where the family offers no choice: eager)
	Layout string // the model's layout ("" where it offers none: one device)
	// Branches: the row's pinned call runs two guidance branches a step (guidance over 1), so
	// the unconditional prediction must be measured.
	Branches bool
}

func (r parityServed) String() string {
	return fmt.Sprintf("engine %s, layout %s", cmp.Or(r.Engine, "eager"), cmp.Or(r.Layout, "single"))
}

// eagerOnOneDevice says whether the runtime is the reference itself.
func (r parityServed) eagerOnOneDevice() bool {
	return cmp.Or(r.Engine, "eager") == "eager" && cmp.Or(r.Layout, "single") == "single"
}

// checkParity fails the parity check where the server's parity figures did not pass, or say
// they passed where the figures do not, naming engine, layout and figures. Figures that are
// absent (nil) or say no check ran are the caller's to judge (parityMissing).
func checkParity(p *spec.Parity, r parityServed) error {
	if p == nil || p.NotChecked != "" {
		return nil
	}
	if !p.Passed {
		return check.Fail("parity", "%s refused by the worker's parity check: %s (%s)", r, strings.Join(p.Failed, "; "), p)
	}
	if bad := parityContradictions(p, r); len(bad) > 0 {
		return check.Fail("parity", "%s: the server says parity passed, its figures say otherwise: %s (%s)", r, strings.Join(bad, "; "), p)
	}
	return nil
}

// parityMissing is why p holds no figures to check (nil: it does): no parity at all, or one
// the worker marks not checked.
func parityMissing(p *spec.Parity) string {
	switch {
	case p == nil:
		return "no parity figures"
	case p.NotChecked != "":
		return "parity not checked (" + p.NotChecked + ")"
	}
	return ""
}

// parityContradictions lists where the figures break the contract.
func parityContradictions(p *spec.Parity, r parityServed) []string {
	var bad []string
	c := spec.ParityBounds
	type quantity struct {
		name                          string
		floor, served, bound, ceiling float64
	}
	qs := []quantity{
		{"cond", p.CondFP32Reference, p.CondFP32Served, p.CondBound, p.CondCeiling},
		{"guided", p.FP32Reference, p.FP32Served, p.Bound, p.Ceiling},
	}
	switch u := []*float64{p.UncondFP32Reference, p.UncondFP32Served, p.UncondBound, p.UncondCeiling}; {
	case u[0] != nil && u[1] != nil && u[2] != nil && u[3] != nil:
		qs = append(qs, quantity{"uncond", *u[0], *u[1], *u[2], *u[3]})
	case r.Branches:
		bad = append(bad, "the uncond prediction is not measured, where the row's step runs two guidance branches")
	}
	for _, q := range qs {
		switch {
		case !(q.floor > 0):
			bad = append(bad, fmt.Sprintf("the %s floor %.4g is not a measured distance", q.name, q.floor))
		case q.floor > c.Ceiling[q.name] || q.ceiling > c.Ceiling[q.name]:
			bad = append(bad, fmt.Sprintf("the %s floor %.4g (ceiling %.4g) is over the ceiling %.4g", q.name, q.floor, q.ceiling, c.Ceiling[q.name]))
		case q.bound > c.FloorFactor*q.floor+paritySlack:
			bad = append(bad, fmt.Sprintf("the %s bound %.4g is wider than %g x its floor %.4g", q.name, q.bound, c.FloorFactor, q.floor))
		case !(q.served <= q.bound):
			bad = append(bad, fmt.Sprintf("the %s prediction is %.4g from fp32, over its bound %.4g", q.name, q.served, q.bound))
		}
	}
	switch {
	case p.MaxAbsBound > c.MaxAbsFactor*p.MaxAbsFP32Reference+paritySlack:
		bad = append(bad, fmt.Sprintf("the latents' bound %.4g is wider than %g x their floor %.4g", p.MaxAbsBound, c.MaxAbsFactor, p.MaxAbsFP32Reference))
	case !(p.MaxAbsFP32Served <= p.MaxAbsBound):
		bad = append(bad, fmt.Sprintf("the latents are up to %.4g from fp32's, over their bound %.4g", p.MaxAbsFP32Served, p.MaxAbsBound))
	}
	isRef := p.Served == spec.IsReference
	sameUncond := p.UncondFP32Served == nil && p.UncondFP32Reference == nil ||
		p.UncondFP32Served != nil && p.UncondFP32Reference != nil && *p.UncondFP32Served == *p.UncondFP32Reference
	if isRef != (p.RelL2 == nil) || isRef && (p.FP32Served != p.FP32Reference || p.CondFP32Served != p.CondFP32Reference || !sameUncond) {
		bad = append(bad, fmt.Sprintf("served %q with figures against eager of another runtime", p.Served))
	}
	if isRef && !r.eagerOnOneDevice() {
		// Only eager on one device is the reference: any other runtime is measured against it.
		bad = append(bad, fmt.Sprintf("served %q under %s: only eager on one device is the reference", p.Served, r))
	}
	return bad
}

// parity is the serve stage's parity check: the figures held to the contract (checkParity).
// A GPU row's worker the suite launched must report figures it checked (docs/GPU.md "Parity
// before ready"): none, or "not checked", fails parity. An endpoint that reports none is named
// as a limit on the row: nothing holds its runtime to eager on one device.
func (c *caseRun) parity(s *serving, r parityServed) error {
	why := parityMissing(c.Row.Parity)
	switch {
	case why == "":
		return checkParity(c.Row.Parity, r)
	case c.Entry.GPU == nil:
		return nil // no GPU, no fast runtime to hold (the reference and in-process families)
	case !s.External:
		return check.Fail("parity", "%s: the launched worker's ready line carries %s: a GPU worker holds its runtime to eager on one device before ready", r, why)
	}
	c.limit(spec.FamilyValidated, "parity: not reported (the endpoint's /v1/models carries "+why+"): nothing holds its runtime to eager on one device")
	return nil
}

// launchFailure is a failed launch's check: parity where the worker refused its runtime at
// load, launch otherwise.
func launchFailure(err error) error {
	if strings.Contains(err.Error(), parityRefused) {
		return check.Fail("parity", "the worker refused its runtime at load: %w", err)
	}
	return check.Fail("launch", "%w", err)
}
