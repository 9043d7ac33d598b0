package spec

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// parityJSON is parity's contract, the one file the worker (models/pyworker/parity.py) and
// the suite both read.
//
//go:embed parity.json
var parityJSON []byte

// ParityContract is parity's bounds (docs/GPU.md "Parity before ready"): each prediction
// within FloorFactor times eager bf16's distance to fp32, the latents' largest difference
// within MaxAbsFactor times eager bf16's, and each prediction's floor under its Ceiling.
type ParityContract struct {
	FloorFactor  float64            `json:"floor_factor"`
	MaxAbsFactor float64            `json:"max_abs_factor"`
	Ceiling      map[string]float64 `json:"ceiling"` // by quantity: cond, uncond, guided
}

// ParityQuantities are the predictions parity measures: the transformer's first call of the
// step (the conditional branch), its second (the unconditional branch, where the step runs
// two) and the guided prediction the scheduler is handed.
var ParityQuantities = []string{"cond", "uncond", "guided"}

// ParityBounds is parity.json as read.
var ParityBounds = mustParityContract(parityJSON)

func mustParityContract(b []byte) ParityContract {
	var c ParityContract
	if err := json.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("models/spec/parity.json: %v", err))
	}
	for _, q := range ParityQuantities {
		if !(c.Ceiling[q] > 0) {
			panic(fmt.Sprintf("models/spec/parity.json: no ceiling for %s", q))
		}
	}
	if !(c.FloorFactor > 1) || !(c.MaxAbsFactor > 1) {
		panic(fmt.Sprintf("models/spec/parity.json: factors %g and %g must be over 1", c.FloorFactor, c.MaxAbsFactor))
	}
	return c
}
