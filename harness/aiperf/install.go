// Package aiperf drives the published AIPerf (pinned, from PyPI, in a managed virtualenv)
// against a server, and reads what it exports. docs/AIPERF.md lists the wire facts this
// relies on, verified against the installed package.
package aiperf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Version is the pinned AIPerf release.
const Version = "0.13.0"

// EnvVenv overrides where the virtualenv lives.
const EnvVenv = "MEDIAQUAL_AIPERF_VENV"

// Env is an installed AIPerf.
type Env struct {
	Venv    string
	Python  string
	Binary  string // the aiperf console script
	Version string // as the package metadata reports it
}

// DefaultVenv is $MEDIAQUAL_AIPERF_VENV; else .cache/aiperf-<Version> under root when it is
// there (make aiperf's link into the shared cache, or a virtualenv of the clone's own); else
// aiperf-<Version> in the shared cache (SharedCache), where make aiperf would put it. So
// `go test` run before make installs AIPerf where every clone finds it, not into the clone.
func DefaultVenv(root string) string {
	if v := os.Getenv(EnvVenv); v != "" {
		return v
	}
	local := filepath.Join(root, ".cache", "aiperf-"+Version)
	if _, err := os.Lstat(local); err == nil {
		return local
	}
	return filepath.Join(SharedCache(), "aiperf-"+Version)
}

// SharedCache is where the virtualenvs are built once per machine, as the Makefile's
// VENV_CACHE: $VENV_CACHE, else $XDG_CACHE_HOME/mediaqual, else $HOME/.cache/mediaqual
// (TestSharedCacheIsTheMakefiles).
func SharedCache() string {
	if v := os.Getenv("VENV_CACHE"); v != "" {
		return v
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		base = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	return filepath.Join(base, "mediaqual")
}

// Ensure returns the AIPerf in venv, creating the virtualenv and installing aiperf==Version
// from PyPI when it is missing or holds another version. The installed version is read from
// the package metadata, never assumed. A lock file serialises concurrent installs.
func Ensure(ctx context.Context, venv string, log *os.File) (Env, error) {
	env := Env{Venv: venv, Python: filepath.Join(venv, "bin", "python"), Binary: filepath.Join(venv, "bin", "aiperf")}
	if v, err := installedVersion(ctx, env.Python); err == nil && v == Version {
		env.Version = v
		return env, nil
	}
	if err := os.MkdirAll(filepath.Dir(venv), 0o755); err != nil {
		return env, err
	}
	lock, err := os.OpenFile(venv+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return env, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return env, err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if v, err := installedVersion(ctx, env.Python); err == nil && v == Version {
		env.Version = v
		return env, nil // another process installed it while we waited
	}
	python, err := findPython(ctx)
	if err != nil {
		return env, err
	}
	steps := [][]string{
		{python, "-m", "venv", "--clear", venv},
		{env.Python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "aiperf==" + Version},
	}
	for _, argv := range steps {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if log != nil {
			cmd.Stdout, cmd.Stderr = log, log
		}
		if err := cmd.Run(); err != nil {
			return env, fmt.Errorf("aiperf install: %s: %v\n%s", strings.Join(argv, " "), err, tail(out.String(), 2000))
		}
	}
	v, err := installedVersion(ctx, env.Python)
	if err != nil {
		return env, err
	}
	if v != Version {
		return env, fmt.Errorf("aiperf install: metadata says %s, pinned %s", v, Version)
	}
	env.Version = v
	return env, nil
}

// findPython picks an interpreter AIPerf supports (3.11 to 3.13).
func findPython(ctx context.Context) (string, error) {
	for _, name := range []string{"python3.12", "python3.11", "python3.13", "python3"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		out, err := exec.CommandContext(ctx, p, "-c", "import sys; print('%d.%d' % sys.version_info[:2])").Output()
		if v := strings.TrimSpace(string(out)); err == nil && (v == "3.11" || v == "3.12" || v == "3.13") {
			return p, nil
		}
	}
	return "", errors.New("aiperf install: no Python 3.11-3.13 on PATH (AIPerf " + Version + " requires one)")
}

func installedVersion(ctx context.Context, python string) (string, error) {
	out, err := exec.CommandContext(ctx, python, "-c", "import importlib.metadata as m; print(m.version('aiperf'))").Output()
	if err != nil {
		return "", fmt.Errorf("aiperf not installed in %s: %v", filepath.Dir(filepath.Dir(python)), err)
	}
	return strings.TrimSpace(string(out)), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
