package pyworker

import (
	"testing"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
)

// fused.py's kernels on CPU tensors under Triton's interpreter (test_fused.py).
func TestFusedKernelsPythonUnitTests(t *testing.T) {
	pytest.UnitTestsWith(t, pytest.TorchPython(t), "test_fused")
}
