package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
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
	fs, _ := serveFlags(&bytes.Buffer{})
	// A flag's parenthesis that starts with a figure states its default: it must be the flag's.
	for _, f := range regexp.MustCompile("`-([a-z][a-z-]*)`(?: \\(([0-9][^ ;:)]*))?").FindAllSubmatch(m[1], -1) {
		name, stated := string(f[1]), string(f[2])
		listed = append(listed, name)
		if fl := fs.Lookup(name); fl != nil && stated != "" {
			want, got := fl.DefValue, stated
			if d, err := time.ParseDuration(stated); err == nil {
				got = d.String()
			}
			assert.Equal(t, want, got, "README's default of -%s", name)
		}
	}
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
	slices.Sort(listed)
	assert.Equal(t, flags, listed, "README's flags (sorted) against mediaserve's")
}

// Every flag docs/API.md names is one of mediaserve's or mediaserve task's, and a default it
// states in a parenthesis is the flag's.
func TestAPIDocNamesRealFlags(t *testing.T) {
	flags := map[string]*flag.Flag{}
	fs, _ := serveFlags(&bytes.Buffer{})
	fs.VisitAll(func(f *flag.Flag) { flags[f.Name] = f })
	var usage bytes.Buffer
	require.ErrorIs(t, runTask([]string{"-h"}, &usage, slog.New(slog.DiscardHandler)), flag.ErrHelp)
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(usage.String(), -1) {
		if flags[m[1]] == nil {
			flags[m[1]] = &flag.Flag{Name: m[1]}
		}
	}
	require.Contains(t, flags, "raw", "task's flags")
	b, err := os.ReadFile("../../docs/API.md")
	require.NoError(t, err)
	found := 0
	for _, m := range regexp.MustCompile("`-([a-z][a-z-]*)`(?: \\(([0-9]+)\\)| \\(([0-9]+) MiB default\\))?").FindAllSubmatch(b, -1) {
		f := flags[string(m[1])]
		if !assert.NotNil(t, f, "docs/API.md names -%s, which mediaserve does not have", m[1]) {
			continue
		}
		found++
		if n := string(m[2]); n != "" {
			assert.Equal(t, f.DefValue, n, "docs/API.md's default of -%s", m[1])
		}
		if mib := string(m[3]); mib != "" {
			n, _ := strconv.Atoi(mib)
			assert.Equal(t, f.DefValue, strconv.Itoa(n<<20), "docs/API.md's default of -%s", m[1])
		}
	}
	assert.NotZero(t, found)
}

// README's poll loop ends on every terminal status, saying why a job failed, and keeps
// polling while the job is queued or in progress. curl is a stub answering one status.
func TestReadmePollLoopEnds(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^id=\$\(curl .*\n(?:\s.*\n)*((?:.*\n){2})`).FindSubmatch(b)
	require.NotNil(t, m, "README has no video example")
	loop := string(m[1])
	require.Contains(t, loop, "/v1/videos/$id", "the two lines after the request are the poll loop")
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatalf("jq runs README's poll loop: %v", err)
	}
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "curl"), []byte(
		"#!/bin/sh\necho '{\"status\": \"'$STATUS'\", \"error\": {\"code\": \"task_failed\"}}'\n"), 0o755))
	for status, ends := range map[string]bool{"completed": true, "failed": true, "queued": false, "in_progress": false} {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		cmd := exec.CommandContext(ctx, "bash", "-c", "id=video_1\n"+loop)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "STATUS="+status)
		out, err := cmd.CombinedOutput()
		ended := ctx.Err() == nil
		cancel()
		assert.Equal(t, ends, ended, "%s: the loop ends (%v, %s)", status, err, out)
		if status == "failed" {
			assert.Contains(t, string(out), "task_failed", "a failed job's error is shown")
		}
		if status == "completed" {
			assert.NoError(t, err)
			assert.Empty(t, string(out))
		}
	}
}
