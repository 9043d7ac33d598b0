package qwenimage

import (
	"testing"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
)

// fused.py's processor and kernel mode on CPU tensors under Triton's interpreter (test_fused.py).
func TestFusedEnginePythonUnitTests(t *testing.T) {
	pytest.UnitTestsWith(t, pytest.TorchPython(t), "test_fused")
}
