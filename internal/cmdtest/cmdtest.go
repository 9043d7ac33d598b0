// Package cmdtest runs a program's main as its user does, in a child of the program's own
// test binary: its exit status, its output, and what it left behind in its working directory
// and home (a program asked only for its usage must leave nothing).
package cmdtest

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const envMain = "MEDIAQUAL_CMDTEST_MAIN"

// Main is the program's TestMain: in a child started by Run it is the program (main, then exit
// 0 unless main exited itself); otherwise it runs the tests.
func Main(m *testing.M, main func()) {
	if os.Getenv(envMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Result is what one run of the program did.
type Result struct {
	Code           int
	Stdout, Stderr string
	Left           []string // files and directories the run created, relative to its working directory or home ("~/...")
}

// Run runs the program with args in an empty working directory under an empty HOME and
// XDG_CACHE_HOME, with env added.
func Run(t *testing.T, args []string, env ...string) Result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, home := t.TempDir(), t.TempDir()
	cmd := exec.Command(exe, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envMain+"=1", "HOME="+home, "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	r := Result{}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatal(err)
		}
		r.Code = exit.ExitCode()
	}
	r.Stdout, r.Stderr = stdout.String(), stderr.String()
	r.Left = append(left(t, dir, ""), left(t, home, "~/")...)
	return r
}

// AssertHelp runs the program with -h: it must exit 0 with a usage that starts "usage: " and
// holds want, and leave nothing behind.
func AssertHelp(t *testing.T, want string) {
	t.Helper()
	r := Run(t, []string{"-h"})
	if r.Code != 0 {
		t.Errorf("-h exited %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	usage := r.Stdout + r.Stderr
	if !strings.HasPrefix(usage, "usage: ") || !strings.Contains(usage, want) {
		t.Errorf("-h printed no usage naming %q:\n%s", want, usage)
	}
	if len(r.Left) > 0 {
		t.Errorf("-h left %d files behind: %v", len(r.Left), r.Left[:min(len(r.Left), 5)])
	}
}

func left(t *testing.T, root, prefix string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && path != root {
			rel, _ := filepath.Rel(root, path)
			out = append(out, prefix+rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
