package pyworker

import "testing"

// The shared worker machinery's own tests (test_worker.py): rgb24 conversion, the L0 marker.
func TestWorkerPythonUnitTests(t *testing.T) { UnitTests(t, "test_worker") }
