package pyworker

import (
	"testing"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
)

// The shared worker machinery's own tests (test_worker.py): rgb24 conversion, the L0 marker.
// Once with whatever python3 is (the pure paths, torch's tests not run), once with the torch
// environment, where every test runs (the engines' compile on the CPU among them).
func TestWorkerPythonUnitTests(t *testing.T) { pytest.UnitTests(t, "test_worker") }

func TestWorkerPythonUnitTestsWithTorch(t *testing.T) {
	pytest.UnitTestsWith(t, pytest.TorchPython(t), "test_worker")
}
