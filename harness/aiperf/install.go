// Package aiperf drives the published AIPerf (pinned, from PyPI, in a managed virtualenv)
// against a server, and reads what it exports. docs/AIPERF.md lists the wire facts this
// relies on, verified against the installed package.
package aiperf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
// the package metadata, never assumed. A lock file serialises concurrent installs. With a
// log, an install says what it does and, every ProgressEvery, how far along it is.
func Ensure(ctx context.Context, venv string, log io.Writer) (Env, error) {
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
	steps := []struct {
		what string
		argv []string
	}{
		{"creating the virtualenv", []string{python, "-m", "venv", "--clear", venv}},
		{"pip install aiperf==" + Version, []string{env.Python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", "aiperf==" + Version}},
	}
	if log != nil {
		fmt.Fprintf(log, "aiperf install: AIPerf %s from PyPI into %s (about 1 GB; a few minutes)\n", Version, venv)
	}
	for i, st := range steps {
		cmd := exec.CommandContext(ctx, st.argv[0], st.argv[1:]...)
		out := &pipProgress{}
		cmd.Stdout, cmd.Stderr = out, out
		stop := func() {}
		if log != nil {
			stop = out.report(log, fmt.Sprintf("aiperf install: step %d of %d, %s", i+1, len(steps), st.what), ProgressEvery)
		}
		err := cmd.Run()
		stop()
		if err != nil {
			return env, fmt.Errorf("aiperf install: %s: %v\n%s", strings.Join(st.argv, " "), err, tail(out.String(), 2000))
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

// ProgressEvery is how often an install with a log says how far along it is.
var ProgressEvery = 10 * time.Second

// pipProgress is a step's output as it comes (kept whole, for an error's tail), read for how
// far along pip is: packages resolved, wheels downloaded and their size, then installing.
type pipProgress struct {
	mu         sync.Mutex
	out        strings.Builder
	line       strings.Builder // the line not yet ended
	resolved   int
	downloaded int
	mb         float64
	phase      string
}

// wheelSize is the size pip prints after a wheel it downloads: "Downloading x.whl (55.0 MB)".
var wheelSize = regexp.MustCompile(`^Downloading \S+\.whl \(([\d.]+) (kB|MB|GB)\)`)

func (p *pipProgress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.Write(b)
	for _, c := range string(b) {
		if c != '\n' && c != '\r' {
			p.line.WriteRune(c)
			continue
		}
		p.read(strings.TrimSpace(p.line.String()))
		p.line.Reset()
	}
	return len(b), nil
}

func (p *pipProgress) read(l string) {
	switch {
	case strings.HasPrefix(l, "Collecting "):
		p.resolved++
		p.phase = "resolving"
	case strings.HasPrefix(l, "Downloading "):
		if m := wheelSize.FindStringSubmatch(l); m != nil {
			n, _ := strconv.ParseFloat(m[1], 64)
			p.mb += n * map[string]float64{"kB": 1e-3, "MB": 1, "GB": 1e3}[m[2]]
			p.downloaded++
			p.phase = "downloading"
		}
	case strings.HasPrefix(l, "Installing collected packages"):
		p.phase = "installing the packages"
	case strings.HasPrefix(l, "Successfully installed"):
		p.phase = "installed"
	}
}

// status says how far along the step is, from what pip has printed so far ("" before it has).
func (p *pipProgress) status() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.phase == "" {
		return ""
	}
	return fmt.Sprintf("%d packages resolved, %d wheels downloaded (%.0f MB), %s", p.resolved, p.downloaded, p.mb, p.phase)
}

func (p *pipProgress) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// report writes what to log now and, every interval until stop, how long the step has run and
// how far along it is; stop writes how long it ran.
func (p *pipProgress) report(log io.Writer, what string, every time.Duration) (stop func()) {
	start := time.Now()
	fmt.Fprintf(log, "%s ...\n", what)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				line := fmt.Sprintf("%s: %s", what, time.Since(start).Round(time.Second))
				if st := p.status(); st != "" {
					line += ": " + st
				}
				fmt.Fprintln(log, line)
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		fmt.Fprintf(log, "%s: ended after %s\n", what, time.Since(start).Round(time.Second))
	}
}
