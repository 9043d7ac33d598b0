package gpuruns

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/pyworker/pytest"
)

// decode.py, which the Qwen folder's run.sh runs on the uploads: Pillow alone and the worker's
// own open_reference in two alternating rounds, and the inflate alone, each line with positive
// figures, before and after torch; a file that is no image fails it.
func TestDecodeScript(t *testing.T) {
	py := pytest.TorchPython(t)
	img, err := filepath.Abs("../../fixtures/images/chelsea.png")
	require.NoError(t, err)
	out, err := exec.Command(py, "decode.py", "--torch", "--reps", "1", img).CombinedOutput()
	require.NoError(t, err, string(out))
	line := regexp.MustCompile(`(?m)^((?:plain|torch imported), (?:pillow alone [12]|pipelined [12]|inflate alone)) +decode p50 ([\d.]+) ms \(min [\d.]+, max [\d.]+\), process CPU p50 ([\d.]+) ms \(1 decodes\)$`)
	got := line.FindAllStringSubmatch(string(out), -1)
	require.Len(t, got, 10, string(out))
	for _, m := range got {
		for _, f := range m[2:] {
			v, err := strconv.ParseFloat(f, 64)
			require.NoError(t, err)
			assert.Greater(t, v, 0.0, "%s: %s", m[1], m[0])
		}
	}

	bad := filepath.Join(t.TempDir(), "not.png")
	require.NoError(t, os.WriteFile(bad, []byte("not an image"), 0o644))
	out, err = exec.Command(py, "decode.py", "--reps", "1", bad).CombinedOutput()
	assert.Error(t, err, "an undecodable file is an error, not a figure: %s", out)
	assert.Contains(t, string(out), "UnidentifiedImageError")
}
