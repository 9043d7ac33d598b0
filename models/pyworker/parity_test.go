package pyworker

import "testing"

// parity.py's figures and TorchBackend.prepare (parity before ready) on a tiny WanPipeline.
func TestParityPythonUnitTests(t *testing.T) {
	t.Parallel()
	UnitTestsWith(t, TorchPython(t), "test_parity")
}
