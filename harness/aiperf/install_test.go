package aiperf_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/aiperf"
)

// fakeVenv makes a venv whose python answers every question with out.
func fakeVenv(t *testing.T, out string) string {
	venv := filepath.Join(t.TempDir(), "venv")
	require.NoError(t, os.MkdirAll(filepath.Join(venv, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(venv, "bin", "python"), []byte("#!/bin/sh\necho "+out+"\n"), 0o755))
	return venv
}

// A venv whose package metadata names another AIPerf is never used: Ensure reinstalls, and
// fails, naming both versions, when the reinstall still leaves the wrong one.
func TestEnsureRefusesAnotherVersion(t *testing.T) {
	venv := fakeVenv(t, "0.12.0")
	bin := t.TempDir()
	// A Python 3.12 whose venv and pip steps succeed without changing anything.
	require.NoError(t, os.WriteFile(filepath.Join(bin, "python3.12"), []byte("#!/bin/sh\necho 3.12\n"), 0o755))
	t.Setenv("PATH", bin)
	env, err := aiperf.Ensure(context.Background(), venv, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "aiperf install: metadata says 0.12.0, pinned "+aiperf.Version)
	assert.Empty(t, env.Version)

	t.Setenv("PATH", t.TempDir()) // nothing to reinstall with
	_, err = aiperf.Ensure(context.Background(), venv, nil)
	assert.ErrorContains(t, err, "aiperf install: no Python 3.11-3.13 on PATH")
}

// The Makefile names the shared virtualenv after the pin (make aiperf): the two must agree, or
// make would link a venv of another version where the tests look.
func TestMakefilePinsAIPerf(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^AIPERF_VERSION := ([^#\s]+)`).FindSubmatch(b)
	require.NotNil(t, m, "no AIPERF_VERSION in the Makefile")
	assert.Equal(t, aiperf.Version, string(m[1]))
}

// Without make, the tests look for AIPerf where make aiperf puts it: the clone's .cache link
// when there is one, else the shared cache, never a fresh install inside the clone (issue #28).
func TestDefaultVenvIsTheSharedOne(t *testing.T) {
	t.Setenv(aiperf.EnvVenv, "")
	t.Setenv("VENV_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "")
	home, root := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	shared := filepath.Join(home, ".cache", "mediaqual", "aiperf-"+aiperf.Version)
	assert.Equal(t, shared, aiperf.DefaultVenv(root), "a clone without .cache")

	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, "xdg"))
	assert.Equal(t, filepath.Join(home, "xdg", "mediaqual", "aiperf-"+aiperf.Version), aiperf.DefaultVenv(root))
	t.Setenv("VENV_CACHE", filepath.Join(home, "vc"))
	assert.Equal(t, filepath.Join(home, "vc", "aiperf-"+aiperf.Version), aiperf.DefaultVenv(root))

	local := filepath.Join(root, ".cache", "aiperf-"+aiperf.Version)
	require.NoError(t, os.MkdirAll(filepath.Dir(local), 0o755))
	require.NoError(t, os.Symlink(shared, local))
	assert.Equal(t, local, aiperf.DefaultVenv(root), "make aiperf's link, even dangling")
	t.Setenv(aiperf.EnvVenv, "/elsewhere")
	assert.Equal(t, "/elsewhere", aiperf.DefaultVenv(root))
}

// The Makefile's VENV_CACHE is SharedCache's rule.
func TestSharedCacheIsTheMakefiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "Makefile"))
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^VENV_CACHE \?= \$\(or \$\(XDG_CACHE_HOME\),\$\(HOME\)/\.cache\)/mediaqual$`, string(b))
}

// README's `make ...` before a bare `go test ./...` is make test's setup, less what go test
// does itself (AIPerf, DefaultVenv) and vet.
func TestReadmeSaysWhatGoTestNeeds(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(moduleRoot(t), "Makefile"))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(moduleRoot(t), "README.md"))
	require.NoError(t, err)
	test := regexp.MustCompile(`(?m)^test: (.*)$`).FindSubmatch(mk)
	venvs := regexp.MustCompile(`(?m)^venvs: .*\n\t.*--output-sync=line (.*)$`).FindSubmatch(mk)
	require.NotNil(t, test, "no test target")
	require.NotNil(t, venvs, "no venvs recipe")
	var want []string
	for _, p := range strings.Fields(string(test[1])) {
		switch p {
		case "venvs":
			want = append(want, strings.Fields(string(venvs[1]))...)
		default:
			want = append(want, p)
		}
	}
	want = slices.DeleteFunc(want, func(p string) bool { return p == "vet" || p == "aiperf" })
	m := regexp.MustCompile("run `make ([a-z0-9 -]+)` first").FindSubmatch(readme)
	require.NotNil(t, m, "README does not say what to make before go test ./...")
	got := strings.Fields(string(m[1]))
	slices.Sort(got)
	slices.Sort(want)
	assert.Equal(t, want, got)
}
