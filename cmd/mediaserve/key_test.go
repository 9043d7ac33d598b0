package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testKey = "sk-test-7f3a9c"

// The key is never printed: not by -h, not by a mistyped flag (the flag package prints every
// default then), not by task -h.
func TestKeyNeverPrinted(t *testing.T) {
	t.Setenv(envAPIKey, testKey)
	for _, args := range [][]string{{"-h"}, {"-no-such-flag"}, {"help"}, {"task", "-h"}} {
		_, out := runCLI(args...)
		assert.NotContains(t, out, testKey, "%v", args)
	}
}

// The key comes from -api-key, -api-key-file or the environment, and once read it is gone
// from the environment, so no child (ffmpeg, a worker) inherits it.
func TestKeyLeavesTheEnvironment(t *testing.T) {
	t.Setenv(envAPIKey, testKey)
	key, err := apiKey(&serveOpts{})
	require.NoError(t, err)
	assert.Equal(t, testKey, key)
	_, set := os.LookupEnv(envAPIKey)
	assert.False(t, set)
	out, err := exec.Command("env").Output()
	require.NoError(t, err)
	assert.NotContains(t, string(out), testKey, "a child's environment")

	file := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(file, []byte(testKey+"\n"), 0o600))
	t.Setenv(envAPIKey, "from-env")
	key, err = apiKey(&serveOpts{apiKeyFile: file})
	require.NoError(t, err)
	assert.Equal(t, testKey, key, "the file wins over the environment")
	_, set = os.LookupEnv(envAPIKey)
	assert.False(t, set)

	_, err = apiKey(&serveOpts{apiKey: "a", apiKeyFile: file})
	assert.ErrorContains(t, err, "not both")
	require.NoError(t, os.WriteFile(file, []byte("\n"), 0o600))
	_, err = apiKey(&serveOpts{apiKeyFile: file})
	assert.ErrorContains(t, err, "first line is empty")
}

// Nor does a server log it: one that starts (and stops: its load fails) with the key from a
// file, its log and usage captured.
func TestKeyNotLogged(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(file, []byte(testKey), 0o600))
	_, out := runCLI("-port", "0", "-model", "ref-t2v", "-fault", "load-fails", "-api-key-file", file, "-ledger", filepath.Join(dir, "l"))
	assert.Contains(t, out, "load")
	assert.NotContains(t, out, testKey)
}

// A mediaserve that fails to start leaves no empty ledger file; one that was there stays.
func TestFailedStartLeavesNoLedger(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	code, out := runCLI("-port", "0", "-model", "ref-t2v", "-fault", "load-fails", "-ledger", ledger)
	require.Equal(t, 1, code, out)
	assert.NoFileExists(t, ledger)

	require.NoError(t, os.WriteFile(ledger, nil, 0o644))
	code, out = runCLI("-port", "0", "-model", "ref-t2v", "-fault", "load-fails", "-ledger", ledger)
	require.Equal(t, 1, code, out)
	assert.FileExists(t, ledger, "a ledger the server did not create is left alone")
}
