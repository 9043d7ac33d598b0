package qualify

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Parity's contract (docs/API.md, models/pyworker/parity.py), which the harness holds a
// server's figures to instead of taking its word: each prediction's bound is at most
// parityFloorFactor times eager bf16's distance to fp32, the latents' at most parityMaxAbsFactor
// times, and a floor over parityCeiling means the fp32 reference is broken.
const (
	parityFloorFactor  = 2.0
	parityMaxAbsFactor = 4.0
	// slack for the figures' round trip through JSON (the worker writes Python's repr)
	paritySlack = 1e-9
)

var parityCeiling = map[string]float64{"cond": 0.06, "guided": 0.15}

// parityRefused is how a worker that failed its parity check says so before it exits: the
// first line of parity.ParityError, in the launch's log tail.
const parityRefused = "differs from eager on one device"

// checkParity fails the parity check where the server's parity figures (nil: it makes none)
// did not pass, or say they passed where the figures do not, naming engine, layout and figures.
func checkParity(p *spec.Parity, engine, layout string) error {
	if p == nil || p.NotChecked != "" {
		return nil
	}
	where := fmt.Sprintf("engine %s, layout %s", cmp.Or(engine, "eager"), cmp.Or(layout, "single"))
	if !p.Passed {
		return check.Fail("parity", "%s refused by the worker's parity check: %s (%s)", where, strings.Join(p.Failed, "; "), p)
	}
	if bad := parityContradictions(p); len(bad) > 0 {
		return check.Fail("parity", "%s: the server says parity passed, its figures say otherwise: %s (%s)", where, strings.Join(bad, "; "), p)
	}
	return nil
}

// parityContradictions lists where the figures break the contract.
func parityContradictions(p *spec.Parity) []string {
	var bad []string
	for _, q := range []struct {
		name                          string
		floor, served, bound, ceiling float64
	}{
		{"cond", p.CondFP32Reference, p.CondFP32Served, p.CondBound, p.CondCeiling},
		{"guided", p.FP32Reference, p.FP32Served, p.Bound, p.Ceiling},
	} {
		switch {
		case !(q.floor > 0):
			bad = append(bad, fmt.Sprintf("the %s floor %.4g is not a measured distance", q.name, q.floor))
		case q.floor > parityCeiling[q.name] || q.ceiling > parityCeiling[q.name]:
			bad = append(bad, fmt.Sprintf("the %s floor %.4g (ceiling %.4g) is over the ceiling %.4g", q.name, q.floor, q.ceiling, parityCeiling[q.name]))
		case q.bound > parityFloorFactor*q.floor+paritySlack:
			bad = append(bad, fmt.Sprintf("the %s bound %.4g is wider than %g x its floor %.4g", q.name, q.bound, parityFloorFactor, q.floor))
		case !(q.served <= q.bound):
			bad = append(bad, fmt.Sprintf("the %s prediction is %.4g from fp32, over its bound %.4g", q.name, q.served, q.bound))
		}
	}
	switch {
	case p.MaxAbsBound > parityMaxAbsFactor*p.MaxAbsFP32Reference+paritySlack:
		bad = append(bad, fmt.Sprintf("the latents' bound %.4g is wider than %g x their floor %.4g", p.MaxAbsBound, parityMaxAbsFactor, p.MaxAbsFP32Reference))
	case !(p.MaxAbsFP32Served <= p.MaxAbsBound):
		bad = append(bad, fmt.Sprintf("the latents are up to %.4g from fp32's, over their bound %.4g", p.MaxAbsFP32Served, p.MaxAbsBound))
	}
	isRef := p.Served == spec.IsReference
	if isRef != (p.RelL2 == nil) || isRef && (p.FP32Served != p.FP32Reference || p.CondFP32Served != p.CondFP32Reference) {
		bad = append(bad, fmt.Sprintf("served %q with figures against eager of another runtime", p.Served))
	}
	return bad
}

// launchFailure is a failed launch's check: parity where the worker refused its runtime at
// load, launch otherwise.
func launchFailure(err error) error {
	if strings.Contains(err.Error(), parityRefused) {
		return check.Fail("parity", "the worker refused its runtime at load: %w", err)
	}
	return check.Fail("launch", "%w", err)
}
