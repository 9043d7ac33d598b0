package selftest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/launch"
	qual "github.com/mediaqual/mediaqual/harness/qualify"
	"github.com/mediaqual/mediaqual/internal/casegen"
	"github.com/mediaqual/mediaqual/models"
)

var (
	root       string // the module root, the working directory of every test here
	driver     string // the root package's test binary: the qualification suite itself
	mediaserve string // MEDIAQUAL_MEDIASERVE, or one built for these tests
)

func TestMain(m *testing.M) {
	os.Exit(setUp(m))
}

// setUp builds the driver and mediaserve once for every test here and runs them in the module
// root. The children choose their own targets: a run already aimed at an endpoint or a fault
// is refused rather than passed on to them.
func setUp(m *testing.M) int {
	for _, k := range []string{qual.EnvEndpoint, qual.EnvFault} {
		if os.Getenv(k) != "" {
			fmt.Fprintf(os.Stderr, "selftest: %s is set; the self-tests choose their own targets, so unset it\n", k)
			return 1
		}
	}
	var err error
	if root, err = filepath.Abs(".."); err == nil {
		err = os.Chdir(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "mediaqual-selftest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	driver = filepath.Join(dir, "mediaqual.test")
	if b, err := exec.Command("go", "test", "-c", "-o", driver, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the driver (go test -c .): %v\n%s", err, b)
		return 1
	}
	cfg, err := qual.FromEnv(root, filepath.Join(dir, "mediaserve"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mediaserve = cfg.Mediaserve
	if mediaserve == filepath.Join(dir, "mediaserve") {
		if err := launch.BuildMediaserve(root, mediaserve); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// TestDriverHoldsOnlyTheRows: the driver's tests are the inventory's rows, one each, so that
// `make qualify` (which runs the driver whole) reports the rows and nothing else.
func TestDriverHoldsOnlyTheRows(t *testing.T) {
	cmd := exec.Command(driver, "-test.list", ".")
	cmd.Env = append(withoutEnv(os.Environ(), "MEDIAQUAL_REPORT_DIR", "MEDIAQUAL_MEDIASERVE"), "MEDIAQUAL_MEDIASERVE="+mediaserve)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var want []string
	for _, e := range models.Inventory() {
		want = append(want, casegen.TestName(e.ID))
	}
	got := strings.Fields(string(out))
	slices.Sort(want)
	slices.Sort(got)
	assert.Equal(t, want, got, "the driver's tests (go test -list . .) against the inventory's rows")
}

// TestGeneratedCasesAreCurrent fails when the inventory changed without `go generate`.
func TestGeneratedCasesAreCurrent(t *testing.T) {
	files, err := casegen.Files()
	require.NoError(t, err)
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale against the inventory: run go generate .", name)
		}
	}
}

func withoutEnv(env []string, keys ...string) []string {
	var out []string
	for _, kv := range env {
		if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(kv, k+"=") }) {
			out = append(out, kv)
		}
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startWatching starts cmd with its output (stdout and stderr together) collected, and returns
// once that output holds marker or ctx is done (the caller checks ctx.Err()). output is what cmd
// printed so far; after cmd.Wait, all of it (exec copies it in before Wait returns).
func startWatching(ctx context.Context, t *testing.T, cmd *exec.Cmd, marker string) (output func() string) {
	w := &watchedOutput{marker: []byte(marker), seen: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.WaitDelay = 10 * time.Second // a process left holding the output open cannot hang Wait
	require.NoError(t, cmd.Start())
	select {
	case <-w.seen:
	case <-ctx.Done():
	}
	return w.String
}

// watchedOutput is a child's output as it comes; seen is closed once it holds marker.
type watchedOutput struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker []byte // nil once seen
	seen   chan struct{}
}

func (w *watchedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	from := max(0, w.buf.Len()-len(w.marker)+1) // a marker split between two writes is found too
	w.buf.Write(p)
	if w.marker != nil && bytes.Contains(w.buf.Bytes()[from:], w.marker) {
		close(w.seen)
		w.marker = nil
	}
	return len(p), nil
}

func (w *watchedOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
