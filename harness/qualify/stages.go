package qualify

import (
	"github.com/mediaqual/mediaqual/internal/stages"
	"github.com/mediaqual/mediaqual/models/spec"
)

// The stages of a qualification, by the names Run gives their subtests and the result row its
// reports.Stage entries. They are stable: reports, CI dashboards and docs refer to them, and a
// test of another module can select one (go test -run 'TestMine/my-row/identity'). They are
// defined in internal/stages, where the generator of this repository's own cases, which imports
// nothing from harness, reads them too.
const (
	StageInventory   = stages.Inventory   // "inventory"
	StageCorrectness = stages.Correctness // "correctness"
	StageServe       = stages.Serve       // "serve"
	StageAIPerf      = stages.AIPerf      // "aiperf"
	StageArtifacts   = stages.Artifacts   // "artifacts"
	StageIdentity    = stages.Identity    // "identity"
	StageInfluence   = stages.Influence   // "influence"
	StageTiming      = stages.Timing      // "timing"
	StageConcurrency = stages.Concurrency // "concurrency"
	StageCleanup     = stages.Cleanup     // "cleanup"
	StageHistory     = stages.History     // "history"
)

// Stages lists the stages Run runs for e, in order: an excluded row's inventory alone, and
// influence only for an image_edit row.
func Stages(e spec.Entry) []string { return stages.For(e) }
