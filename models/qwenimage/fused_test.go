package qwenimage

import (
	"testing"

	"github.com/mediaqual/mediaqual/models/pyworker"
)

// fused.py's processor and kernel mode on CPU tensors under Triton's interpreter (test_fused.py).
func TestFusedEnginePythonUnitTests(t *testing.T) {
	pyworker.UnitTestsWith(t, pyworker.TorchPython(t), "test_fused")
}
