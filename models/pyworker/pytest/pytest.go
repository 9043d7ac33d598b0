// Package pytest is Go test scaffolding: the helpers with which a family's go test (and
// models/pyworker's own) runs its adapter's Python tests. models/pyworker beside it holds what
// every Python family's adapter shares: worker.py (the docs/WORKER.md protocol) and testing.py
// (its Python test scaffolding). Only _test.go files import this package.
package pytest

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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

// EnvTorchVenv names the virtualenv with torch, diffusers and transformers on the CPU
// (scripts/torch-cpu.txt) for the tests of several ranks and of the tiny real pipelines;
// default .cache/torch-2.11.0 in the module root, which `make torch` (part of make test) builds.
const EnvTorchVenv = "MEDIAQUAL_TORCH_VENV"

// TorchPython is that virtualenv's python. Its absence fails the test: these tests are the
// only run of the real pipelines without a GPU, and must not quietly not run.
func TorchPython(t *testing.T) string {
	t.Helper()
	venv := os.Getenv(EnvTorchVenv)
	if venv == "" {
		root, err := moduleRoot()
		require.NoError(t, err)
		venv = filepath.Join(root, ".cache", "torch-2.11.0")
	}
	py := filepath.Join(venv, "bin", "python")
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("no torch virtualenv at %s (%v): run `make torch` (make test does) or set %s", venv, err, EnvTorchVenv)
	}
	return py
}

// moduleRoot is the directory of the go.mod above the test's working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// pyEnv is the Python tests' environment. Unless they are set already: OMP_WAIT_POLICY=PASSIVE,
// so that torch's OpenMP threads sleep while they wait for work instead of spinning first, which,
// with several torch processes on a 2-core machine (make test), burned a tenth to a fifth of
// their CPU time; and OMP_NUM_THREADS=1, one compute thread a process: make test runs several
// torch processes at once, each of which would otherwise start a thread a core (the five Python
// packages, one after another on the 2-core machine: 341 CPU s against 359, 245 s against 275).
// Every process of a test computes with the same one thread, so what the tests compare (bytes of
// two processes, of two layouts) is computed alike on both sides.
func pyEnv() []string {
	env := append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	for _, kv := range []string{"OMP_WAIT_POLICY=PASSIVE", "OMP_NUM_THREADS=1"} {
		if _, ok := os.LookupEnv(strings.SplitN(kv, "=", 2)[0]); !ok {
			env = append(env, kv)
		}
	}
	return env
}

// UnitTests runs a unittest module in the test's directory (a family's test_adapter, or
// pyworker's own test_worker) and fails unless it passes. A skipped Python test is never a
// pass: one skipped for missing modules (testing.needs) is reported by name as a skipped Go
// subtest, "not run", after checking the modules really are missing; any other skip fails.
func UnitTests(t *testing.T, module string) { UnitTestsWith(t, Python(t), module) }

// UnitTestsWith is UnitTests under another python (a virtualenv's), with env ("NAME=value"
// entries) added to its environment: what the caller made for the tests, such as a bundle
// they only read (UnchangedAfter checks that).
func UnitTestsWith(t *testing.T, python, module string, env ...string) {
	reportSkips(t, python, runUnitTests(t, python, ".", module, env))
}

// UnitTestClassesWith is UnitTestsWith with each TestCase class of the module in a python
// process of its own, as parallel subtests named after the classes: a module whose classes each
// start real pipelines takes about as long as its longest class rather than the sum. Each class
// must run as many tests as unittest's loader finds in it, so none is left out. The classes
// must share nothing but what each makes for itself, or what the caller made for them all and
// names in env ("NAME=value" entries added to each process's environment), which they only read
// (UnchangedAfter checks that).
func UnitTestClassesWith(t *testing.T, python, module string, env ...string) {
	for _, c := range testClasses(t, python, ".", module) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out := runUnitTests(t, python, ".", module+"."+c.name, env)
			m := ranCount.FindStringSubmatch(out)
			require.NotNil(t, m, "no test count in the output")
			require.Equal(t, strconv.Itoa(c.tests), m[1], "tests run of %s", c.name)
			reportSkips(t, python, out)
		})
	}
}

var ranCount = regexp.MustCompile(`(?m)^Ran (\d+) tests? in `)

// listClasses prints each TestCase class of a module, as unittest's loader finds them
// (loadTestsFromModule), with its number of tests.
const listClasses = `
import sys, unittest
mod = __import__(sys.argv[1])
if hasattr(mod, "load_tests"):
    sys.exit(sys.argv[1] + " defines load_tests: run it whole (UnitTestsWith)")
for name in dir(mod):
    obj = getattr(mod, name)
    if isinstance(obj, type) and issubclass(obj, unittest.TestCase):
        n = unittest.defaultTestLoader.loadTestsFromTestCase(obj).countTestCases()
        if n:
            print(name, n)
`

type testClass struct {
	name  string
	tests int
}

func testClasses(t *testing.T, python, dir, module string) []testClass {
	cmd := exec.Command(python, "-c", listClasses, module)
	cmd.Dir = dir
	cmd.Env = pyEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "listing the test classes of %s: %s", module, stderr.String())
	require.NotEmpty(t, strings.TrimSpace(string(out)), "%s has no tests", module)
	var classes []testClass
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var c testClass
		_, err := fmt.Sscan(line, &c.name, &c.tests)
		require.NoError(t, err, "%q", line)
		classes = append(classes, c)
	}
	return classes
}

// reportSkips fails t for every skip judgeSkips calls a problem and reports the tests not run
// for missing modules as skipped subtests.
func reportSkips(t *testing.T, python, out string) {
	notRun, problems := judgeSkips(out, importable(python))
	for _, p := range problems {
		t.Error(p)
	}
	for _, s := range notRun {
		t.Run(s.Test, func(t *testing.T) { t.Skipf("%s", s.Reason) })
	}
}

func runUnitTests(t *testing.T, python, dir, module string, env []string) string {
	cmd := exec.Command(python, "-m", "unittest", "-v", module)
	cmd.Dir = dir
	cmd.Env = append(pyEnv(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest %s:\n%s", module, out)
	require.NoError(t, err, "the Python unit tests fail")
	require.Contains(t, string(out), "\nOK")
	return string(out)
}

// Command is python with args, run in the test's directory under the Python tests' environment
// (as the unit tests run): for what a test makes once before its Python classes start, such as
// a bundle they share.
func Command(python string, args ...string) *exec.Cmd {
	cmd := exec.Command(python, args...)
	cmd.Env = pyEnv()
	return cmd
}

// UnchangedAfter records every file under dir (its path, size and SHA-256) and fails t, once t
// and its subtests have ended, if any file was added, removed or changed: for a directory that
// several tests share and must only read.
func UnchangedAfter(t *testing.T, dir string) {
	t.Helper()
	before := dirDigest(t, dir)
	t.Cleanup(func() { assert.Equal(t, before, dirDigest(t, dir), "%s is shared and read only, yet it changed", dir) })
}

func dirDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		files[rel] = fmt.Sprintf("%d bytes sha256 %x", len(b), sha256.Sum256(b))
		return err
	})
	require.NoError(t, err)
	return files
}

// NotRunPrefix starts the reason of a test skipped because Python modules are missing
// (testing.needs writes it, followed by the missing modules).
const NotRunPrefix = "not run: missing python modules: "

// Skip is one skipped Python test: its id (module.Class.test) and reason.
type Skip struct{ Test, Reason string }

var (
	testHeader = regexp.MustCompile(`^\w+ \(([\w.]+)\)`)
	skipped    = regexp.MustCompile(`\.\.\. skipped '(.*)'$`)
	skipCount  = regexp.MustCompile(`(?m)^OK \(skipped=(\d+)\)$`)
)

// judgeSkips reads `unittest -v` output: the tests skipped for modules that importable says
// are missing are not run; every other skip, a claim of a missing module that imports, and a
// skip count that does not match the named skips are problems.
func judgeSkips(out string, importable func(string) bool) (notRun []Skip, problems []string) {
	test, named := "", 0
	for _, line := range strings.Split(out, "\n") {
		if m := testHeader.FindStringSubmatch(line); m != nil {
			test = m[1]
		}
		m := skipped.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		named++
		s := Skip{Test: test, Reason: m[1]}
		mods, ok := strings.CutPrefix(s.Reason, NotRunPrefix)
		if !ok {
			problems = append(problems, fmt.Sprintf("python test %s was skipped (%q): a skip is not a pass; only missing modules (testing.needs) may keep a test from running", s.Test, s.Reason))
			continue
		}
		for _, mod := range strings.Split(mods, ", ") {
			if importable(mod) {
				problems = append(problems, fmt.Sprintf("python test %s was skipped for missing %s, which imports here", s.Test, mod))
			}
		}
		notRun = append(notRun, s)
	}
	if m := skipCount.FindStringSubmatch(out); m != nil && m[1] != strconv.Itoa(named) {
		problems = append(problems, fmt.Sprintf("unittest reports %s skipped, %d named in its output", m[1], named))
	}
	return notRun, problems
}

// importable asks python whether a module can be found.
func importable(python string) func(string) bool {
	return func(mod string) bool {
		return exec.Command(python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)", mod).Run() == nil
	}
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
