package check

// Info is one check of the qualification: its stable name and the stages that report it
// ("" for a check any stage can fail).
type Info struct {
	Name   string
	Stages []string
}

// Registry is every check a qualification can fail. docs/QUALIFICATION.md's table is tested
// against it (TestRegistryMatchesTheDocs), so is every check name the harness writes
// (TestEveryCheckNameIsRegistered) and every check the fault self-test expects; each is shown
// failing by a fault or a test (TestEveryCheckIsShownFailing).
var Registry = []Info{
	{"inventory-row", []string{"inventory"}},
	{"inventory-task", []string{"inventory"}},
	{"gpu-environment", []string{"inventory"}},
	{"bundle-revision", []string{"inventory"}},
	{"golden", []string{"correctness"}},
	{"reference-output", []string{"correctness", "artifacts"}},
	{"reference-frames", []string{"correctness", "artifacts"}},
	{"reference-size", []string{"correctness", "artifacts"}},
	{"bundle-digest", []string{"correctness"}},
	{"launch", []string{"serve"}},
	{"endpoint", []string{"serve"}},
	{"reconcile", []string{"serve"}},
	{"refuses-unsupported", []string{"serve"}},
	{"parity", []string{"serve"}},
	{"shape-probe", []string{"aiperf"}},
	{"probe-identity", []string{"aiperf"}},
	{"seed-influence", []string{"aiperf"}},
	{"aiperf-install", []string{"aiperf"}},
	{"aiperf-exports", []string{"aiperf"}},
	{"aiperf-version", []string{"aiperf"}},
	{"aiperf-accounting", []string{"aiperf"}},
	{"aiperf-counts", []string{"aiperf"}},
	{"aiperf-inputs", []string{"aiperf"}},
	{"aiperf-exit", []string{"aiperf"}},
	{"artifact-fetch", []string{"artifacts"}},
	{"edit-response", []string{"artifacts"}},
	{"ledger-digest", []string{"artifacts"}},
	{"actual-settings", []string{"artifacts", "influence"}},
	{"container", []string{"artifacts"}},
	{"frame-count", []string{"artifacts"}},
	{"size", []string{"artifacts"}},
	{"fps", []string{"artifacts"}},
	{"frame-timing", []string{"artifacts"}},
	{"duration", []string{"artifacts"}},
	{"decodable", []string{"artifacts"}},
	{"decoded-frames", []string{"artifacts"}},
	{"decoded-size", []string{"artifacts"}},
	{"blank-frame", []string{"artifacts"}},
	{"frame-size", []string{"artifacts"}},
	{"motion", []string{"artifacts"}},
	{"edit-size", []string{"artifacts"}},
	{"edit-unchanged", []string{"artifacts"}},
	{"distinct-outputs", []string{"artifacts"}},
	{"encode-psnr", []string{"artifacts"}},
	{"artifact-sha256", []string{"identity"}},
	{"frame-digests", []string{"identity"}},
	{"frame-psnr", []string{"identity"}},
	{"artifact-digest", []string{"influence"}},
	{"influence-changes-output", []string{"influence"}},
	{"influence-closer-to-own", []string{"influence"}},
	{"influence-size", []string{"influence"}},
	{"influence-expected-gap", []string{"influence"}},
	{"timing-latency", []string{"timing"}},
	{"task-wall", []string{"timing"}},
	{"task-time-agrees", []string{"timing"}},
	{"task-native", []string{"concurrency"}},
	{"timing-parts", []string{"timing"}},
	{"timing-overhead", []string{"timing"}},
	{"concurrency", []string{"concurrency"}},
	{"delete", []string{"cleanup"}},
	{"no-leftover-files", []string{"cleanup"}},
	{"clean-exit", []string{"cleanup"}},
	// The job API's model (harness/jobmodel.Rules), held to the row's history.
	{"job-identity", []string{"history"}},
	{"job-status", []string{"history"}},
	{"job-timestamps", []string{"history"}},
	{"job-content", []string{"history"}},
	{"job-deleted", []string{"history"}},
	{"job-orphans", []string{"history"}},
	{"job-fields", []string{"history"}},
	{"deadline", []string{""}},
}

// Registered says whether name is a check of the Registry.
func Registered(name string) bool {
	for _, c := range Registry {
		if c.Name == name {
			return true
		}
	}
	return false
}
