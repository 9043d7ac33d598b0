package qualify_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/aiperf"
)

// externalModule is a module of its own (go.mod with a replace directive pointing at this
// repository's root) that requires this one, adds its own row and its own target and runs
// qualify.Run on them: what docs/EXTERNAL.md shows.
const externalModule = "testdata/external"

// TestExternalModule builds and runs externalModule's test as its own module: go test in its
// directory, with the requirements its go.mod and go.sum state (-mod=readonly) and no module
// proxy (GOPROXY=off: every module it needs is one this module's build already has in the
// module cache), so it passes only while another module can require this one and qualify
// its own row through the exported API alone.
func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds another module and runs AIPerf")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	gobin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command runs the external module's test")
	cmd := exec.CommandContext(t.Context(), gobin, "test", "-count=1", "-v", "-timeout", "5m", "./...")
	cmd.Dir = externalModule
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "GOPROXY=off",
		// The AIPerf this module's tests use, not a second install under the other module.
		aiperf.EnvVenv+"="+aiperf.DefaultVenv(root))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go test in %s:\n%s", externalModule, out)
	assert.Contains(t, string(out), "--- PASS: TestMyServer ", "the external module's qualification ran")
	assert.Regexp(t, `(?m)^ok\s+example\.com/myserver\s`, string(out))
	t.Logf("%s", out)
}

// docs/EXTERNAL.md shows the external module as it is: its go.mod and its test, each a code
// block equal to the file, so the documented example is the one TestExternalModule runs.
func TestExternalDocIsTheExternalModule(t *testing.T) {
	b, err := os.ReadFile("../../docs/EXTERNAL.md")
	require.NoError(t, err)
	blocks := map[string]string{}
	for _, m := range regexp.MustCompile("(?ms)^```(\\S*)\\n(.*?)^```$").FindAllStringSubmatch(string(b), -1) {
		if m[1] == "go" || m[1] == "go.mod" {
			require.NotContains(t, blocks, m[1], "one %s block in docs/EXTERNAL.md", m[1])
			blocks[m[1]] = m[2]
		}
	}
	for lang, file := range map[string]string{"go": "myserver_test.go", "go.mod": "go.mod"} {
		want, err := os.ReadFile(filepath.Join(externalModule, file))
		require.NoError(t, err)
		require.Contains(t, blocks, lang, "docs/EXTERNAL.md shows %s in a ```%s block", file, lang)
		assert.Equal(t, string(want), blocks[lang], "docs/EXTERNAL.md's ```%s block is not %s/%s", lang, externalModule, file)
	}
}
