// Package pyworker holds what every Python family's adapter shares: worker.py (the
// docs/WORKER.md protocol), testing.py (its test scaffolding), and these Go helpers with which
// a family's go test runs its adapter's tests. Nothing in production imports this package.
package pyworker

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Python returns python3. The adapters' tests need nothing else (no torch, diffusers, numpy
// or Pillow); they skip only where python3 itself is absent.
func Python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: the adapter's tests need it")
	}
	return p
}

func pyEnv() []string { return append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") }

// UnitTests runs a unittest module in the test's directory (a family's test_adapter, or
// pyworker's own test_worker) and fails unless it passes.
func UnitTests(t *testing.T, module string) {
	cmd := exec.Command(Python(t), "-m", "unittest", "-v", module)
	cmd.Env = pyEnv()
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest %s:\n%s", module, out)
	require.NoError(t, err, "the Python unit tests fail")
	assert.Contains(t, string(out), "\nOK")
}

// Script runs a Python snippet in the test's directory (so it can import the family's
// adapter) with in marshalled as JSON on stdin, and decodes its stdout into out.
func Script(t *testing.T, script string, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	require.NoError(t, err)
	cmd := exec.Command(Python(t), "-c", script)
	cmd.Stdin = bytes.NewReader(b)
	cmd.Env = pyEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	require.NoError(t, json.Unmarshal(stdout, out), string(stdout))
}

// Each runs script over items (as Script, which marshals them exactly as server/worker sends
// settings) and returns its one answer per item.
func Each[In, Out any](t *testing.T, script string, items []In) []Out {
	t.Helper()
	var got []Out
	Script(t, script, items, &got)
	require.Len(t, got, len(items))
	return got
}

// ExpectFatalWithoutBundle runs a worker argv (its script path relative to the module root,
// as mediaserve resolves it against MEDIAQUAL_ROOT) outside the repository with an empty
// bundles root: the adapter must answer with exactly one fatal line on stdout naming the
// missing bundle, and exit 1, before it ever imports torch.
func ExpectFatalWithoutBundle(t *testing.T, argv []string, bundle string) {
	t.Helper()
	Python(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.Equal(t, "python3", argv[0])
	args := append([]string{filepath.Join(root, argv[1])}, argv[2:]...)
	bundles := t.TempDir()
	cmd := exec.Command(argv[0], args...)
	cmd.Dir = t.TempDir() // mediaserve's working directory is not the repository
	cmd.Env = append(pyEnv(), "MEDIAQUAL_BUNDLES="+bundles, "MEDIAQUAL_BUNDLE=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr: %s", stderr.String())
	assert.Equal(t, 1, exit.ExitCode())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 1, "stdout is protocol only: %q", stdout.String())
	var ev struct{ Event, Message string }
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &ev))
	assert.Equal(t, "fatal", ev.Event)
	assert.Contains(t, ev.Message, filepath.Join(bundles, bundle))
	assert.Contains(t, stderr.String(), "load failed")
}
