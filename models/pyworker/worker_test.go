package pyworker

import (
	"testing"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
)

// The shared worker machinery's own tests (test_worker.py): rgb24 conversion, the L0 marker.
func TestWorkerPythonUnitTests(t *testing.T) { pytest.UnitTests(t, "test_worker") }
