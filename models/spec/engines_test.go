package spec_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
)

// The Go list of engines is the workers' own (backend.py's ENGINES tuple, which their --engine
// accepts), in the same order.
func TestEnginesAreTheWorkers(t *testing.T) {
	b, err := os.ReadFile("../pyworker/backend.py")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ENGINES = \(([^)]*)\)`).FindSubmatch(b)
	require.NotNil(t, m, "backend.py has no ENGINES tuple")
	var py []string
	for _, q := range regexp.MustCompile(`"([^"]+)"`).FindAllSubmatch(m[1], -1) {
		py = append(py, string(q[1]))
	}
	assert.Equal(t, py, spec.Engines)
	for _, e := range spec.Engines {
		assert.NoError(t, spec.CheckEngine(e))
	}
	assert.EqualError(t, spec.CheckEngine("regional"), `unknown engine "regional"; engines: eager, regional-compile, regional-compile-graphs, regional-compile-fused, regional-compile-fused-graphs`)
}
