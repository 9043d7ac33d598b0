package qualify_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/mediaqual/mediaqual/harness/qualify"
	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
)

// myInventory stands for a user's own rows, kept in their own module (docs/EXTERNAL.md). Here
// it is one row of this repository's inventory, renamed as the user's server would serve it.
func myInventory() []spec.Entry {
	e, _ := models.Lookup("ref-t2v")
	e.ID = "my-org/my-t2v"
	return []spec.Entry{e}
}

// Another module qualifies its own server on its own rows from a test of its own, gated on
// MEDIAQUAL_ENDPOINT like an acceptance test (docs/EXTERNAL.md). Run needs that test's
// *testing.T, so the example defines the test function; compiling it here keeps it current.
func ExampleRun() {
	testMyServer := func(t *testing.T) {
		if os.Getenv(qualify.EnvEndpoint) == "" {
			t.Skip("set MEDIAQUAL_ENDPOINT to the server to qualify")
		}
		cfg, err := qualify.FromEnv(".", "") // no mediaserve here: identity runs against the in-process native path for a Go row
		if err != nil {
			t.Fatal(err)
		}
		rows := myInventory() // []spec.Entry: id, workload, pinned settings, contracts, fixtures
		cfg.Lookup = func(id string) (spec.Entry, error) {
			for _, e := range rows {
				if e.ID == id {
					return e, nil
				}
			}
			return spec.Entry{}, fmt.Errorf("%s is not in my inventory", id)
		}
		for _, e := range rows {
			t.Run(e.ID, func(t *testing.T) {
				row := qualify.Run(t, e, cfg)
				t.Logf("%s: %s; findings: %v", e.ID, row.Outcome, row.Findings)
			})
		}
	}
	_ = testMyServer // in the user's module: func TestMyServer(t *testing.T) { ... }
}
