package pyworker

import "testing"

// fused.py's kernels on CPU tensors under Triton's interpreter (test_fused.py).
func TestFusedKernelsPythonUnitTests(t *testing.T) { UnitTestsWith(t, TorchPython(t), "test_fused") }
