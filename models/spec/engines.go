package spec

import (
	"fmt"
	"slices"
	"strings"
)

// Engines are the engines a Python family's worker can run a row with
// (models/pyworker/backend.py's ENGINES, which TestEnginesAreTheWorkers holds this list to).
// mediaserve's -engine help and check, and the docs that list engines, come from here.
var Engines = []string{"eager", "regional-compile", "regional-compile-graphs", "regional-compile-fused", "regional-compile-fused-graphs"}

// CheckEngine refuses an engine no worker knows, naming the ones it does.
func CheckEngine(engine string) error {
	if !slices.Contains(Engines, engine) {
		return fmt.Errorf("unknown engine %q; engines: %s", engine, strings.Join(Engines, ", "))
	}
	return nil
}
