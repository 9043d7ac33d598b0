package pytest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The wrapper fed the quiet passes it exists to catch: a real unittest run whose module skips
// for a reason other than missing modules, claims a module is missing that imports, and skips
// for a module that is really absent (the only skip allowed, and then reported as not run).
func TestSkipsAreNeverPasses(t *testing.T) {
	dir := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "test_quiet.py"), []byte(fmt.Sprintf(`
import sys, unittest
sys.path.insert(0, %q)
from pyworker import testing

class Quiet(unittest.TestCase):
    def test_runs(self):
        pass

    @unittest.skip("flaky on CI")
    def test_skipped_for_no_reason(self):
        """A docstring moves the verdict to the next line."""

    @unittest.skipUnless(False, testing.NOT_RUN + "json")
    def test_claims_json_is_missing(self):
        pass

@testing.needs("surely_not_a_module_here", "json")
class NeedsAbsent(unittest.TestCase):
    def test_needs(self):
        pass
`, root)), 0o644))
	out := runUnitTests(t, Python(t), dir, "test_quiet", nil)
	assert.Contains(t, out, "OK (skipped=3)", "unittest itself calls this run OK")

	notRun, problems := judgeSkips(out, importable(Python(t)))
	require.Len(t, problems, 2, "%q", problems)
	// unittest runs classes and tests in name order.
	assert.Contains(t, problems[0], "python test test_quiet.Quiet.test_claims_json_is_missing was skipped for missing json, which imports here")
	assert.Contains(t, problems[1], "python test test_quiet.Quiet.test_skipped_for_no_reason was skipped (\"flaky on CI\"): a skip is not a pass")
	require.Len(t, notRun, 2)
	assert.Equal(t, Skip{"test_quiet.NeedsAbsent.test_needs", NotRunPrefix + "surely_not_a_module_here"}, notRun[0], "only the missing module is named")

	_, problems = judgeSkips("test_a (m.C.test_a) ... skipped 'not run: missing python modules: x'\n\nOK (skipped=2)\n", func(string) bool { return false })
	assert.Equal(t, []string{"unittest reports 2 skipped, 1 named in its output"}, problems, "a skip the parser missed")
}

// The classes UnitTestClassesWith runs apart are every class unittest's loader would run, each
// with its number of tests: none without tests, none left out.
func TestTestClassesAreTheLoaders(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "test_split.py"), []byte(`
import unittest

class Base(unittest.TestCase):
    pass

class Mixin:
    def test_shared(self):
        pass

class B(Mixin, Base):
    def test_b(self):
        pass

class A(unittest.TestCase):
    def test_a(self):
        pass
`), 0o644))
	assert.Equal(t, []testClass{{"A", 1}, {"B", 2}}, testClasses(t, Python(t), dir, "test_split"))
}
