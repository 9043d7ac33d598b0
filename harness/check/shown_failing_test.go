package check_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
)

// shownFailing names, for each registered check, the tests that make it fail and read its name
// from the typed failure ("<file from the module root>:<test>"). A check caught by a fault of
// faults_test.go's faultCases needs no entry here (the fault self-test is the evidence), but
// may have one.
var shownFailing = map[string][]string{
	"inventory-row":            {"harness/qualify/checks_test.go:TestInventoryChecksFailByName"},
	"inventory-task":           {"harness/qualify/checks_test.go:TestInventoryChecksFailByName"},
	"gpu-environment":          {"harness/qualify/checks_test.go:TestInventoryChecksFailByName"},
	"bundle-revision":          {"harness/check/check_test.go:TestBundleRevisionChecks"},
	"golden":                   {"harness/check/run_test.go:TestGoldenCatchesChangedOutput"},
	"reference-output":         {"harness/check/check_test.go:TestReferenceOutputChecks"},
	"reference-frames":         {"harness/check/check_test.go:TestReferenceOutputChecks"},
	"reference-size":           {"harness/check/check_test.go:TestReferenceOutputChecks"},
	"bundle-digest":            {"harness/check/check_test.go:TestBundleRevisionChecks"},
	"endpoint":                 {"harness/qualify/checks_test.go:TestUnreachableEndpointFailsEndpoint"},
	"reconcile":                {"harness/check/served_test.go:TestReconcile"},
	"parity":                   {"harness/qualify/parity_test.go:TestParityIsReadFromTheFigures"},
	"shape-probe":              {"harness/qualify/checks_test.go:TestShapeProbeFailsByName"},
	"aiperf-install":           {"harness/qualify/checks_test.go:TestAIPerfInstallFailsByName"},
	"aiperf-version":           {"harness/check/run_test.go:TestAIPerfRunChecksCatchBrokenRuns"},
	"aiperf-exports":           {"harness/check/run_test.go:TestAIPerfRunChecksCatchBrokenRuns"},
	"distinct-outputs":         {"harness/check/check_test.go:TestDistinctOutputs"},
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
	"artifact-digest":          {"harness/check/check_test.go:TestIdentityChecks"},
	"influence-changes-output": {"harness/check/check_test.go:TestInfluenceProbe"},
	"influence-closer-to-own":  {"harness/check/check_test.go:TestInfluenceProbe"},
	"influence-size":           {"harness/check/check_test.go:TestSizeMismatchChecks"},
	"influence-expected-gap":   {"harness/check/run_test.go:TestInfluenceVerdict"},
	"timing-latency":           {"harness/qualify/timing_test.go:TestTimingFailsWithoutAClientLatency"},
	"delete":                   {"harness/check/run_test.go:TestDeletedJobMustAnswer404"},
	"deadline":                 {"harness/qualify/deadline_test.go:TestASilentEndpointFailsByItsDeadline"},
}

// testFunc is what the meta-test reads of one test function.
type testFunc struct {
	literals []string // every string literal in its body, unquoted
	reads    []string // the calls and selectors it makes (Names, Check, failsWith ...)
	makes    bool     // it makes a failure itself (check.Fail or a check.Failure literal)
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
				case *ast.BasicLit:
					if s, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING {
						tf.literals = append(tf.literals, s)
					}
				case *ast.CallExpr:
					switch fn := x.Fun.(type) {
					case *ast.Ident:
						tf.reads = append(tf.reads, fn.Name)
						tf.makes = tf.makes || fn.Name == "Fail" || fn.Name == "fail"
					case *ast.SelectorExpr:
						tf.reads = append(tf.reads, fn.Sel.Name)
						tf.makes = tf.makes || fn.Sel.Name == "Fail"
					}
				case *ast.SelectorExpr:
					tf.reads = append(tf.reads, x.Sel.Name)
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

// readsTheName says whether f reads a failure's check from the typed failure: check.Names, a
// Failure's Check field, or a helper of its own package that does (failsWith, failsAt ...).
func readsTheName(f testFunc, funcs map[string]testFunc) bool {
	for _, r := range f.reads {
		if r == "Names" || r == "Check" {
			return true
		}
		if h, ok := funcs[r]; ok && !strings.HasPrefix(r, "Test") && slices.ContainsFunc(h.reads, func(x string) bool { return x == "Names" || x == "Check" }) {
			return true
		}
	}
	return false
}

// faultChecks is the check column of faults_test.go's faultCases, read from its source.
func faultChecks(t *testing.T, root string) []string {
	af, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "faults_test.go"), nil, 0)
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
	require.NotEmpty(t, checks, "faultCases in faults_test.go")
	return checks
}

// shownFailingGaps is what TestEveryCheckIsShownFailing holds to be empty: for every registered
// check, either a fault of faultCases that must be caught by it, or a mapping in shown to
// tests that exist, contain the check's name as a string literal (exactly, not inside a
// message), read the name from the typed failure and do not make the failure themselves.
func shownFailingGaps(t *testing.T, shown map[string][]string) []string {
	const root = "../.."
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
			switch {
			case !ok:
				gaps = append(gaps, c.Name+": "+ref+": no such test")
			case !slices.Contains(f.literals, c.Name):
				gaps = append(gaps, c.Name+": "+ref+" does not name the check (a string literal \""+c.Name+"\")")
			case !readsTheName(f, parsed[dir]):
				gaps = append(gaps, c.Name+": "+ref+" does not read the check's name from the typed failure (check.Names, Failure.Check)")
			case f.makes:
				gaps = append(gaps, c.Name+": "+ref+" makes a failure itself (check.Fail or a Failure literal)")
			}
		}
	}
	return gaps
}

// TestEveryCheckIsShownFailing: every entry of check.Registry is shown failing somewhere, by a
// fault of the self-test (faultCases) or by a test that makes the check fail and reads its
// name from the typed failure (shownFailing, verified against the tests' source). Shown
// failing by removing one mapping and by pointing one at a test that does not name its check.
func TestEveryCheckIsShownFailing(t *testing.T) {
	assert.Empty(t, shownFailingGaps(t, shownFailing))

	// The mechanism itself: a missing mapping, a test that does not exist, one that does not
	// name the check, one that does not read the typed failure, one that makes the failure
	// itself, and a mapping for no registered check are each reported.
	broken := map[string][]string{}
	for k, v := range shownFailing {
		broken[k] = v
	}
	delete(broken, "shape-probe")
	broken["golden"] = []string{"harness/check/run_test.go:TestNoSuchTest"}
	broken["encode-psnr"] = []string{"harness/check/run_test.go:TestGoldenCatchesChangedOutput"}
	broken["decodable"] = []string{"harness/qualify/published_internal_test.go:TestCorruptPublishedRunDoesNotFailTheRow"}
	broken["launch"] = []string{"harness/check/registry_test.go:TestFailureNames"}
	broken["frame-count"] = []string{"harness/check/registry_test.go:TestEveryCheckNameIsRegistered"}
	broken["no-such-check"] = []string{"harness/check/check_test.go:TestClipChecks"}
	gaps := shownFailingGaps(t, broken)
	for _, want := range []string{
		"shape-probe: no fault of faultCases and no test in shownFailing shows it failing",
		"golden: harness/check/run_test.go:TestNoSuchTest: no such test",
		`encode-psnr: harness/check/run_test.go:TestGoldenCatchesChangedOutput does not name the check (a string literal "encode-psnr")`,
		"decodable: harness/qualify/published_internal_test.go:TestCorruptPublishedRunDoesNotFailTheRow does not name the check",
		"launch: harness/check/registry_test.go:TestFailureNames makes a failure itself",
		"frame-count: harness/check/registry_test.go:TestEveryCheckNameIsRegistered does not read the check's name from the typed failure",
		"no-such-check: mapped in shownFailing, but no registered check",
	} {
		assert.True(t, slices.ContainsFunc(gaps, func(g string) bool { return strings.HasPrefix(g, want) }), "want a gap %q in %q", want, gaps)
	}
}
