package gpuruns

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakePython stands in for python3 running a builder: it logs its arguments, fails when
// FAIL_BUILD is set, and otherwise writes the bundle the builder would (model_index.json under
// --out), at the directory the test names in BUNDLE_DIR.
const fakePython = `#!/bin/bash
echo "$*" >>"$CALLS"
[ -n "${FAIL_BUILD:-}" ] && { echo "no GPU here"; exit 1; }
out=; while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out/$BUNDLE_DIR" && echo '{}' >"$out/$BUNDLE_DIR/model_index.json"
echo "built"
`

// l0Bundle sources bundle.sh in a shell whose python3 is fakePython, its bundles and build logs
// under root.
func l0Bundle(t *testing.T, root string, env []string, builder string) (string, string, int) {
	t.Helper()
	bin := filepath.Join(root, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "python3"), []byte(fakePython), 0o755))
	script, err := filepath.Abs("bundle.sh")
	require.NoError(t, err)
	cmd := exec.Command("bash", "-c", `source "$0" && l0_bundle "$1"`, script, builder)
	cmd.Env = append(os.Environ(), append(env, "MEDIAQUAL_BUNDLES="+filepath.Join(root, "bundles"), "TMPDIR="+root,
		"PATH="+bin+":"+os.Getenv("PATH"), "CALLS="+filepath.Join(root, "calls"))...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), stderr.String(), ee.ExitCode()
	}
	require.NoError(t, err, stderr.String())
	return string(out), stderr.String(), 0
}

func calls(t *testing.T, root string) []string {
	b, err := os.ReadFile(filepath.Join(root, "calls"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// bundle.sh builds a family's bundle once, with the builder's arguments, after removing the
// other family's (one big bundle fits the device's disk), and prints its directory; a failed
// build and an unknown builder are errors that say why.
func TestL0Bundle(t *testing.T) {
	root := t.TempDir()
	bundles := filepath.Join(root, "bundles")
	wan := filepath.Join(bundles, "Wan-AI", "Wan2.1-T2V-1.3B-Diffusers")
	require.NoError(t, os.MkdirAll(wan, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(wan, "model_index.json"), []byte("{}"), 0o644))

	env := []string{"BUNDLE_DIR=Qwen/Qwen-Image-Edit-2511"}
	out, log, rc := l0Bundle(t, root, env, "qwenimage")
	require.Equal(t, 0, rc, log)
	assert.Equal(t, filepath.Join(bundles, "Qwen", "Qwen-Image-Edit-2511")+"\n", out)
	assert.Equal(t, []string{"models/qwenimage/build_l0.py --out " + bundles}, calls(t, root))
	assert.NoDirExists(t, filepath.Join(bundles, "Wan-AI"), "the other family's bundle goes first")
	assert.Contains(t, log, "built in")

	out, _, rc = l0Bundle(t, root, env, "qwenimage")
	require.Equal(t, 0, rc)
	assert.Equal(t, filepath.Join(bundles, "Qwen", "Qwen-Image-Edit-2511")+"\n", out)
	assert.Len(t, calls(t, root), 1, "a bundle already built is not built again")

	env = []string{"BUNDLE_DIR=Wan-AI/Wan2.2-TI2V-5B-Diffusers"}
	out, _, rc = l0Bundle(t, root, env, "wan22")
	require.Equal(t, 0, rc)
	assert.Equal(t, filepath.Join(bundles, "Wan-AI", "Wan2.2-TI2V-5B-Diffusers")+"\n", out)
	assert.Equal(t, "models/wan/build_l0.py --wan22 --out "+bundles, calls(t, root)[1])
	assert.NoDirExists(t, filepath.Join(bundles, "Qwen"))

	out, log, rc = l0Bundle(t, root, append(env, "FAIL_BUILD=1"), "wan")
	assert.Equal(t, 1, rc, "a failed build fails")
	assert.Empty(t, out, "and names no bundle")
	assert.Contains(t, log, "no GPU here", "the build's own words")

	out, log, rc = l0Bundle(t, root, env, "qwen")
	assert.Equal(t, 2, rc)
	assert.Empty(t, out)
	assert.Contains(t, log, "unknown builder 'qwen' (wan, wan22 or qwenimage)")
}
