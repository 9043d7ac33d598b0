package aiperf_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"mediaqual/harness/aiperf"
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
