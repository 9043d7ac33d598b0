package pyworker

import (
	"testing"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
)

// parity.py's figures and TorchBackend.prepare (parity before ready) on a tiny WanPipeline.
func TestParityPythonUnitTests(t *testing.T) {
	t.Parallel()
	pytest.UnitTestsWith(t, pytest.TorchPython(t), "test_parity")
}
