package check_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
)

// shownFailing names, for each registered check, the tests that make it fail and assert it did
// with checktest.Failed ("<file from the module root>:<test>"). A check caught by a fault of
// selftest/faults_test.go's faultCases needs no entry here (the fault self-test is the evidence), but
// may have one.
var shownFailing = map[string][]string{
	"inventory-row":            {"harness/qualify/checks_test.go:TestInventoryChecksFailByName"},
	"inventory-task":           {"harness/qualify/checks_test.go:TestInventoryChecksFailByName"},
	"gpu-environment":          {"harness/qualify/checks_test.go:TestInventoryChecksFailByName"},
	"bundle-revision":          {"harness/check/check_test.go:TestBundleRevisionChecks"},
	"golden":                   {"harness/check/run_test.go:TestGoldenCatchesChangedOutput"},
	"reference-output":         {"harness/check/check_test.go:TestReferenceOutputChecks", "harness/qualify/correctness_test.go:TestServedOutputsHeldToReferenceOutputs"},
	"reference-frames":         {"harness/check/check_test.go:TestReferenceOutputChecks"},
	"reference-size":           {"harness/check/check_test.go:TestReferenceOutputChecks"},
	"bundle-digest":            {"harness/check/check_test.go:TestBundleRevisionChecks"},
	"endpoint":                 {"harness/qualify/checks_test.go:TestUnreachableEndpointFailsEndpoint"},
	"reconcile":                {"harness/check/served_test.go:TestReconcile"},
	"parity":                   {"harness/qualify/parity_test.go:TestParityIsReadFromTheFigures", "harness/qualify/parity_test.go:TestParityMustBeReported"},
	"shape-probe":              {"harness/qualify/checks_test.go:TestShapeProbeFailsByName"},
	"aiperf-install":           {"harness/qualify/checks_test.go:TestAIPerfInstallFailsByName"},
	"aiperf-version":           {"harness/check/run_test.go:TestAIPerfRunChecksCatchBrokenRuns"},
	"aiperf-exports":           {"harness/check/run_test.go:TestAIPerfRunChecksCatchBrokenRuns"},
	"distinct-outputs":         {"harness/check/distinct_test.go:TestOutputsCompareByPicture"},
	"seed-influence":           {"harness/check/distinct_test.go:TestOutputsCompareByPicture"},
	"aiperf-counts":            {"harness/check/run_test.go:TestAIPerfRunChecksCatchBrokenRuns"},
	"aiperf-inputs":            {"harness/check/run_test.go:TestAIPerfRunChecksCatchBrokenRuns"},
	"aiperf-exit":              {"harness/check/run_test.go:TestAIPerfRunChecksCatchBrokenRuns"},
	"edit-response":            {"harness/check/run_test.go:TestEditResponseMustCarryOneImage"},
	"actual-settings":          {"harness/check/served_test.go:TestSettings", "harness/qualify/settings_test.go:TestNativeRecordsAreHeldToTheirSettings", "harness/qualify/settings_test.go:TestServedActualSettings"},
	"frame-count":              {"harness/check/check_test.go:TestClipChecks"},
	"size":                     {"harness/check/check_test.go:TestClipChecks"},
	"fps":                      {"harness/check/check_test.go:TestClipChecks"},
	"duration":                 {"harness/check/check_test.go:TestClipChecks"},
	"decodable":                {"harness/qualify/checks_test.go:TestUndecodableArtifactFailsDecodable"},
	"decoded-frames":           {"harness/check/check_test.go:TestClipChecks"},
	"decoded-size":             {"harness/check/check_test.go:TestSizeMismatchChecks"},
	"blank-frame":              {"harness/check/check_test.go:TestMotionChecks"},
	"frame-size":               {"harness/check/check_test.go:TestSizeMismatchChecks"},
	"motion":                   {"harness/check/check_test.go:TestMotionChecks"},
	"edit-size":                {"harness/check/check_test.go:TestEditChecks"},
	"edit-unchanged":           {"harness/check/check_test.go:TestEditChecks"},
	"encode-psnr":              {"harness/check/run_test.go:TestEncodePSNRMeasuresTheEncoder"},
	"artifact-sha256":          {"harness/check/check_test.go:TestIdentityChecks"},
	"frame-digests":            {"harness/check/check_test.go:TestIdentityChecks"},
	"frame-psnr":               {"harness/check/run_test.go:TestFramePSNRHoldsEveryFrame"},
	"artifact-digest":          {"harness/check/check_test.go:TestIdentityChecks"},
	"influence-changes-output": {"harness/check/check_test.go:TestInfluenceProbe"},
	"influence-closer-to-own":  {"harness/check/check_test.go:TestInfluenceProbe"},
	"influence-size":           {"harness/check/check_test.go:TestSizeMismatchChecks"},
	"influence-expected-gap":   {"harness/check/run_test.go:TestInfluenceVerdict"},
	"timing-latency":           {"harness/qualify/timing_test.go:TestTimingFailsWithoutAClientLatency"},
	"task-wall":                {"harness/qualify/timing_test.go:TestTimingCrossChecksTheServersFigures"},
	"task-time-agrees":         {"harness/qualify/timing_test.go:TestTimingCrossChecksTheServersFigures"},
	"timing-parts":             {"harness/qualify/timing_test.go:TestTimingCrossChecksTheServersFigures"},
	"timing-overhead":          {"harness/qualify/timing_test.go:TestTimingCrossChecksTheServersFigures"},
	"delete":                   {"harness/check/run_test.go:TestDeletedJobMustAnswer404", "harness/qualify/cleanup_test.go:TestCleanupDeletesEveryJobAndChecksItsContent"},
	"deadline":                 {"harness/qualify/deadline_test.go:TestASilentEndpointFailsByItsDeadline"},
}

// testFunc is what the meta-test reads of one test function's source.
type testFunc struct {
	makes bool // it makes a failure itself (check.Fail or a check.Failure literal)
}

// parseTests reads every top-level function of the _test.go files in dir.
func parseTests(t *testing.T, dir string) map[string]testFunc {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	require.NoError(t, err)
	funcs := map[string]testFunc{}
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		require.NoError(t, err, f)
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil {
				continue
			}
			var tf testFunc
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.CallExpr:
					switch fn := x.Fun.(type) {
					case *ast.Ident:
						tf.makes = tf.makes || fn.Name == "Fail" || fn.Name == "fail"
					case *ast.SelectorExpr:
						tf.makes = tf.makes || fn.Sel.Name == "Fail"
					}
				case *ast.CompositeLit:
					if s, ok := x.Type.(*ast.SelectorExpr); ok && s.Sel.Name == "Failure" {
						tf.makes = true
					}
					if id, ok := x.Type.(*ast.Ident); ok && id.Name == "Failure" {
						tf.makes = true
					}
				}
				return true
			})
			funcs[fd.Name.Name] = tf
		}
	}
	return funcs
}

// faultChecks is the check column of selftest/faults_test.go's faultCases, read from its source.
func faultChecks(t *testing.T, root string) []string {
	af, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "selftest", "faults_test.go"), nil, 0)
	require.NoError(t, err)
	var checks []string
	ast.Inspect(af, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "faultCases" {
			return true
		}
		require.Len(t, vs.Values, 1)
		for _, e := range vs.Values[0].(*ast.CompositeLit).Elts {
			fields := e.(*ast.CompositeLit).Elts
			require.Len(t, fields, 3, "faultCases rows are {fault, checkpoint, check}")
			lit, ok := fields[2].(*ast.BasicLit)
			require.True(t, ok, "a faultCases check is a string literal")
			s, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			checks = append(checks, s)
		}
		return false
	})
	require.NotEmpty(t, checks, "faultCases in selftest/faults_test.go")
	return checks
}

const root = "../.."

// ran is what a run of the mapped tests showed: by "<dir>:<test>", whether it passed and the
// checks it showed failing (checktest.Failed's lines in its output, its subtests' included).
type ran struct {
	passed map[string]bool
	shown  map[string][]string
}

// runShown runs the tests the maps name, in a child go test of their packages (-json), and
// reads what each showed failing. Tests that do not exist are left to shownFailingGaps.
func runShown(t *testing.T, maps ...map[string][]string) ran {
	tests := map[string][]string{} // package dir -> test names
	for _, m := range maps {
		for _, refs := range m {
			for _, ref := range refs {
				file, fn, _ := strings.Cut(ref, ":")
				dir := filepath.Dir(file)
				if !slices.Contains(tests[dir], fn) {
					tests[dir] = append(tests[dir], fn)
				}
			}
		}
	}
	var names, pkgs []string
	for dir, fns := range tests {
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			continue
		}
		pkgs = append(pkgs, "./"+dir)
		names = append(names, fns...)
	}
	slices.Sort(pkgs)
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, append([]string{"test", "-count=1", "-json", "-run", "^(" + strings.Join(names, "|") + ")$"}, pkgs...)...)
	cmd.Dir = root
	out, _ := cmd.Output() // a failing test is read from the events, not the exit status
	r := ran{passed: map[string]bool{}, shown: map[string][]string{}}
	const module = "github.com/mediaqual/mediaqual/"
	for _, line := range strings.Split(string(out), "\n") {
		var ev struct{ Action, Package, Test, Output string }
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Test == "" {
			continue
		}
		top, _, _ := strings.Cut(ev.Test, "/")
		key := strings.TrimPrefix(ev.Package, module) + ":" + top
		switch {
		case ev.Action == "pass" && top == ev.Test:
			r.passed[key] = true
		case ev.Action == "output":
			if _, name, ok := strings.Cut(strings.TrimSpace(ev.Output), checktest.Shown); ok && !slices.Contains(r.shown[key], name) {
				r.shown[key] = append(r.shown[key], name)
			}
		}
	}
	require.NotEmpty(t, r.passed, "the child run of the mapped tests passed none:\n%s", out)
	return r
}

// shownFailingGaps is what TestEveryCheckIsShownFailing holds to be empty: for every registered
// check, either a fault of faultCases that must be caught by it (the fault self-test asserts
// that it was), or a mapping in shown to tests that exist, do not make the failure themselves,
// and, run, pass having shown the check failing (checktest.Failed).
func shownFailingGaps(t *testing.T, shown map[string][]string, r ran) []string {
	faults := faultChecks(t, root)
	parsed := map[string]map[string]testFunc{}
	var gaps []string
	for name := range shown {
		if !check.Registered(name) {
			gaps = append(gaps, name+": mapped in shownFailing, but no registered check")
		}
	}
	for _, c := range check.Registry {
		tests := shown[c.Name]
		if len(tests) == 0 && !slices.Contains(faults, c.Name) {
			gaps = append(gaps, c.Name+": no fault of faultCases and no test in shownFailing shows it failing")
		}
		for _, ref := range tests {
			file, fn, ok := strings.Cut(ref, ":")
			if !ok || !strings.HasSuffix(file, "_test.go") || !strings.HasPrefix(fn, "Test") {
				gaps = append(gaps, c.Name+": "+ref+" is not <file>_test.go:Test<name>")
				continue
			}
			if _, err := os.Stat(filepath.Join(root, file)); err != nil {
				gaps = append(gaps, c.Name+": "+ref+": no such file")
				continue
			}
			dir := filepath.Join(root, filepath.Dir(file))
			if parsed[dir] == nil {
				parsed[dir] = parseTests(t, dir)
			}
			f, ok := parsed[dir][fn]
			key := filepath.Dir(file) + ":" + fn
			switch {
			case !ok:
				gaps = append(gaps, c.Name+": "+ref+": no such test")
			case f.makes:
				gaps = append(gaps, c.Name+": "+ref+" makes a failure itself (check.Fail or a Failure literal)")
			case !r.passed[key]:
				gaps = append(gaps, c.Name+": "+ref+" did not pass when run")
			case !slices.Contains(r.shown[key], c.Name):
				gaps = append(gaps, c.Name+": "+ref+" ran and did not show the check failing (checktest.Failed); it showed "+fmt.Sprint(r.shown[key]))
			}
		}
	}
	return gaps
}

// TestMentionsACheckOnly is what TestEveryCheckIsShownFailing must refuse: a test that names a
// check and reads typed failures, but shows nothing failing.
func TestMentionsACheckOnly(t *testing.T) {
	t.Log("golden", check.Names(nil))
}

// TestEveryCheckIsShownFailing: every entry of check.Registry is shown failing somewhere, by a
// fault of the self-test (faultCases, whose test asserts the check failed under the fault) or
// by a test that, run here, makes the check fail and asserts it did (shownFailing;
// checktest.Failed says so in its output). A test that only mentions a check's name shows
// nothing. Shown failing by removing one mapping and by pointing others at tests that do not
// exist, show another check, only mention it, or make the failure themselves.
func TestEveryCheckIsShownFailing(t *testing.T) {
	broken := map[string][]string{}
	for k, v := range shownFailing {
		broken[k] = v
	}
	delete(broken, "shape-probe")
	broken["golden"] = []string{"harness/check/run_test.go:TestNoSuchTest"}
	broken["encode-psnr"] = []string{"harness/check/run_test.go:TestGoldenCatchesChangedOutput"}
	broken["decodable"] = []string{"harness/qualify/published_internal_test.go:TestCorruptPublishedRunDoesNotFailTheRow"}
	broken["launch"] = []string{"harness/check/registry_test.go:TestFailureNames"}
	broken["frame-count"] = []string{"harness/check/shown_failing_test.go:TestMentionsACheckOnly"}
	broken["no-such-check"] = []string{"harness/check/check_test.go:TestClipChecks"}
	r := runShown(t, shownFailing, broken)

	assert.Empty(t, shownFailingGaps(t, shownFailing, r))

	gaps := shownFailingGaps(t, broken, r)
	for _, want := range []string{
		"shape-probe: no fault of faultCases and no test in shownFailing shows it failing",
		"golden: harness/check/run_test.go:TestNoSuchTest: no such test",
		"encode-psnr: harness/check/run_test.go:TestGoldenCatchesChangedOutput ran and did not show the check failing",
		"decodable: harness/qualify/published_internal_test.go:TestCorruptPublishedRunDoesNotFailTheRow ran and did not show the check failing",
		"launch: harness/check/registry_test.go:TestFailureNames makes a failure itself",
		"frame-count: harness/check/shown_failing_test.go:TestMentionsACheckOnly ran and did not show the check failing",
		"no-such-check: mapped in shownFailing, but no registered check",
	} {
		assert.True(t, slices.ContainsFunc(gaps, func(g string) bool { return strings.HasPrefix(g, want) }), "want a gap %q in %q", want, gaps)
	}
}
