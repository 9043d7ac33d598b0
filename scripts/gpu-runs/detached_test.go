// Package gpuruns holds the tests of the device scripts in scripts/gpu-runs that can run without
// a GPU.
package gpuruns

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeQualify stands in for qualify.sh: it writes what qualify.sh's run writes (test2json lines,
// a native output and a ledger in the suite's staging folder, moved to the report's at the end),
// waits for the file "go" beside it (at most 20 s), then leaves its archive in $OUT.
const fakeQualify = `#!/bin/bash
here=$(dirname "$0")
staging=$(dirname "$MEDIAQUAL_REPORT_DIR")/.report.run-1
mkdir -p "$staging/cases/x/native/p0" && touch "$staging/cases/x/native/p0/frames.rgb"
printf '=== RUN   TestWan2_2\n=== RUN   TestWan2_2/correctness\n=== RUN   TestWan2_2/aiperf\n' >"$OUT/test2json-$1.out"
printf '{"event":"job","job_id":"a"}\n{"event":"job","job_id":"b"}\n' >"$staging/cases/x/ledger.jsonl"
for i in $(seq 400); do [ -f "$here/go" ] && break; sleep 0.05; done
mv "$staging" "$MEDIAQUAL_REPORT_DIR" && mv "$OUT/test2json-$1.out" "$MEDIAQUAL_REPORT_DIR/"
echo "args $1 $2"
echo "- timing: overhead p50 1.0 ms"
echo archive >"$OUT/run-$1.tgz"
echo '[]' >"$OUT/parity-faults-$2.json"
`

func run(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"detached.sh"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err, string(out))
	return string(out), 0
}

// A detached run: started, refused a second time while it runs, followed (stage, Tasks), then
// followed by one command until it ended (WAIT), which gets the archive (and the parity-faults
// files beside it) in its $OUT; a machine
// without a run says so.
func TestDetachedRun(t *testing.T) {
	tmp := t.TempDir()
	fake := filepath.Join(tmp, "qualify.sh")
	require.NoError(t, os.WriteFile(fake, []byte(fakeQualify), 0o755))
	out1, out2 := filepath.Join(tmp, "out1"), filepath.Join(tmp, "out2")
	require.NoError(t, os.MkdirAll(out1, 0o755))
	require.NoError(t, os.MkdirAll(out2, 0o755))
	state := filepath.Join(tmp, "state")
	// However the test ends, the detached stand-in is let go (it would wait 20 s at most anyway).
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(tmp, "go"), nil, 0o644) })
	env := []string{"DETACHED_DIR=" + state, "QUALIFY=" + fake}

	got, rc := run(t, append(env, "OUT="+out1), "status")
	assert.Equal(t, 2, rc)
	assert.Contains(t, got, "no detached run on this machine")

	got, rc = run(t, append(env, "OUT="+out1), "start", "Wan2.2", "wan22")
	require.Equal(t, 0, rc, got)
	assert.Contains(t, got, "started detached: Wan2.2 (wan22)")

	got, rc = run(t, append(env, "OUT="+out1), "start", "Wan2.2", "wan22")
	assert.Equal(t, 2, rc, "a second start while the first runs is refused")
	assert.Contains(t, got, "not started: a detached run is going already: Wan2.2 wan22")

	require.Eventually(t, func() bool {
		got, _ = run(t, append(env, "OUT="+out2), "status")
		return strings.Contains(got, "stage aiperf")
	}, 10*time.Second, 50*time.Millisecond, got)
	assert.Contains(t, got, "Wan2.2 wan22: stage aiperf, native Tasks 1, served jobs 2, elapsed")
	assert.Contains(t, got, "running (pid")
	assert.NoDirExists(t, filepath.Join(out2, "run-Wan2.2.tgz"))

	// WAIT follows the run in one command: it returns once the run ended, not after WAIT.
	time.AfterFunc(time.Second, func() { _ = os.WriteFile(filepath.Join(tmp, "go"), nil, 0o644) })
	start := time.Now()
	got, rc = run(t, append(env, "OUT="+out2, "WAIT=120"), "status")
	assert.Less(t, time.Since(start), 60*time.Second, "WAIT returned when the run ended")
	assert.Equal(t, 0, rc, got)
	assert.Contains(t, got, "Wan2.2 wan22: stage aiperf, native Tasks 1, served jobs 2", "the progress of the run that ended")
	assert.Contains(t, got, "ended: qualify.sh exited 0")
	assert.Contains(t, got, "args Wan2.2 wan22", "the run got the start's arguments")
	assert.Contains(t, got, "- timing: overhead p50 1.0 ms")
	b, err := os.ReadFile(filepath.Join(out2, "run-Wan2.2.tgz"))
	require.NoError(t, err, "the archive is in the status command's $OUT")
	assert.Equal(t, "archive\n", string(b))
	b, err = os.ReadFile(filepath.Join(out2, "parity-faults-wan22.json"))
	require.NoError(t, err, "faults-and-qualify.sh's files come back beside it")
	assert.Equal(t, "[]\n", string(b))

	// Another boot of the machine: the state is not this machine's run.
	require.NoError(t, os.WriteFile(filepath.Join(state, "machine"), []byte("another-boot\n"), 0o644))
	got, rc = run(t, append(env, "OUT="+out2), "status")
	assert.Equal(t, 2, rc)
	assert.Contains(t, got, "started on another boot of this machine")
}
