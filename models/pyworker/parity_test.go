package pyworker

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
	"github.com/mediaqual/mediaqual/models/spec"
)

// parity.py's figures and TorchBackend.prepare (parity before ready) on a tiny WanPipeline.
func TestParityPythonUnitTests(t *testing.T) {
	t.Parallel()
	pytest.UnitTestsWith(t, pytest.TorchPython(t), "test_parity")
}

// parity.py and the suite read one contract, models/spec/parity.json: the factors and
// ceilings the worker applies are the ones spec.ParityBounds holds its figures to, and every
// quantity the worker measures has a ceiling there.
func TestParityContractIsOneFile(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("python3", "-c", `import json, sys; sys.path.insert(0, "..")
from pyworker import parity
print(json.dumps({"floor_factor": parity.FLOOR_FACTOR, "max_abs_factor": parity.MAX_ABS_FACTOR, "ceiling": parity.CEILING, "quantities": list(parity.QUANTITIES)}))`).Output()
	require.NoError(t, err)
	var got struct {
		spec.ParityContract
		Quantities []string `json:"quantities"`
	}
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, spec.ParityBounds, got.ParityContract)
	assert.ElementsMatch(t, spec.ParityQuantities, got.Quantities)
}
