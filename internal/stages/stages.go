// Package stages names the subtests of a qualification, in order, so the suite and the
// dry-run list agree on them. harness/qualify exports them to other modules (qualify.Stages,
// qualify.StageInventory, ...); they are here so that internal/casegen reads them without
// importing harness.
package stages

import "github.com/mediaqual/mediaqual/models/spec"

// Stage names, stable: CI dashboards and docs refer to them.
const (
	Inventory   = "inventory"
	Correctness = "correctness"
	Serve       = "serve"
	AIPerf      = "aiperf"
	Artifacts   = "artifacts"
	Identity    = "identity"
	Influence   = "influence"
	Timing      = "timing"
	Concurrency = "concurrency"
	Cleanup     = "cleanup"
	History     = "history"
)

// For lists the stages a row's case runs, in order.
func For(e spec.Entry) []string {
	if e.Status == spec.Excluded {
		return []string{Inventory}
	}
	s := []string{Inventory, Correctness, Serve, AIPerf, Artifacts, Identity}
	if e.Workload == spec.ImageEdit {
		s = append(s, Influence)
	}
	return append(s, Timing, Concurrency, Cleanup, History)
}
