package main

import (
	"bytes"
	"flag"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"mediaqual/models"
	"mediaqual/models/spec"
)

// runCLI runs mediaserve with args and returns its exit status and what it wrote to stderr.
func runCLI(args ...string) (int, string) {
	var stderr bytes.Buffer
	code := run(args, &stderr, slog.New(slog.NewTextHandler(&stderr, nil)))
	return code, stderr.String()
}

// -h is a question, not a mistake: it exits 0 and names both subcommands and every engine.
func TestHelpNamesBothSubcommands(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"serve", "-h"}, {"help"}} {
		code, out := runCLI(args...)
		assert.Equal(t, 0, code, "%v", args)
		assert.Contains(t, out, "mediaserve task -model <id>", "%v", args)
		assert.Contains(t, out, "-poll-hold", "%v", args)
		for _, e := range spec.Engines {
			assert.Contains(t, out, e, "%v: -engine's help lists every engine", args)
		}
	}
	code, out := runCLI("task", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "-set")
	assert.Contains(t, out, strings.Join(spec.Engines, ", "))
}

// A mistyped subcommand or a stray word is refused by name before any server starts.
func TestUnknownWordsAreRefused(t *testing.T) {
	code, out := runCLI("taks", "-model", "ref-t2v")
	assert.Equal(t, 2, code)
	assert.Contains(t, out, `unknown subcommand "taks"`)
	assert.NotContains(t, out, "listening")

	code, out = runCLI("-port", "0", "-model", "ref-t2v", "taks")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `unexpected argument "taks"`)
	code, out = runCLI("task", "-model", "ref-t2v", "extra")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `unexpected argument "extra"`)
	code, _ = runCLI("-no-such-flag")
	assert.Equal(t, 2, code)
}

// `mediaserve task` without -model says it is required and which ids there are.
func TestTaskNeedsModel(t *testing.T) {
	code, out := runCLI("task", "-out", t.TempDir())
	assert.Equal(t, 1, code)
	var ids []string
	for _, cp := range models.Servable() {
		ids = append(ids, cp.ID)
	}
	assert.Contains(t, out, "mediaserve: -model is required: one of "+strings.Join(ids, ", "))
	assert.NotContains(t, out, `unknown checkpoint ""`)
}

// An engine no worker knows is refused before a worker starts; every row's engine is one of
// spec.Engines.
func TestEnginesComeFromOneList(t *testing.T) {
	wan, err := models.Lookup("Wan-AI/Wan2.1-T2V-1.3B")
	require.NoError(t, err)
	_, err = withEngine(wan.Checkpoint, "regional")
	assert.ErrorContains(t, err, `unknown engine "regional"; engines: eager, regional-compile`)
	for _, e := range models.Inventory() {
		if e.Engine != "" {
			assert.Contains(t, spec.Engines, e.Engine, e.ID)
		}
	}
}

// The docs that list the engines list spec.Engines, in its order.
func TestDocsListEveryEngine(t *testing.T) {
	quoted := regexp.MustCompile("`([a-z][a-z-]*)`")
	for doc, re := range map[string]*regexp.Regexp{
		"README.md":   regexp.MustCompile("`-engine` \\(([^)]*)\\)"),
		"docs/GPU.md": regexp.MustCompile("`MEDIAQUAL_ENGINE` \\| [^(]*\\(([^)]*)\\)"),
	} {
		b, err := os.ReadFile("../../" + doc)
		require.NoError(t, err)
		m := re.FindSubmatch(b)
		require.NotNil(t, m, "%s lists no engines", doc)
		var listed []string
		for _, q := range quoted.FindAllSubmatch(m[1], -1) {
			listed = append(listed, string(q[1]))
		}
		assert.Equal(t, spec.Engines, listed, doc)
	}
}

// README's mediaserve flag list names every flag of serve's flag set, and no other.
func TestReadmeListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)\nFlags: (.*?)\nThe contract is in`).FindSubmatch(b)
	require.NotNil(t, m, "README has no mediaserve flag list")
	var listed []string
	for _, f := range regexp.MustCompile("`-([a-z][a-z-]*)`").FindAllSubmatch(m[1], -1) {
		listed = append(listed, string(f[1]))
	}
	var flags []string
	fs, _ := serveFlags(&bytes.Buffer{})
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
	slices.Sort(listed)
	assert.Equal(t, flags, listed, "README's flags (sorted) against mediaserve's")
}
