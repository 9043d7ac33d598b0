package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTaskBatchRunsEveryJobWithOneLoad(t *testing.T) {
	dir := t.TempDir()
	batch := filepath.Join(dir, "batch.jsonl")
	require.NoError(t, os.WriteFile(batch, []byte(
		`{"out": "`+filepath.Join(dir, "a")+`", "fields": {"prompt": "a red kite", "seed": "1"}}`+"\n\n"+
			`{"out": "`+filepath.Join(dir, "b")+`", "fields": {"prompt": "a red kite", "seed": "2"}}`+"\n"), 0o644))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, runTask([]string{"-model", "ref-t2v", "-batch", batch}, io.Discard, log))

	seeds := map[string]int64{}
	digests := map[string]string{}
	for _, job := range []string{"a", "b"} {
		var rec struct {
			Settings struct {
				Seed int64 `json:"seed"`
			} `json:"settings"`
			Product struct {
				Path   string `json:"path"`
				SHA256 string `json:"sha256"`
			} `json:"product"`
			Streamed int `json:"streamed_frames"`
		}
		b, err := os.ReadFile(filepath.Join(dir, job, "actual.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &rec))
		assert.FileExists(t, rec.Product.Path)
		assert.Equal(t, filepath.Join(dir, job, "artifact.mp4"), rec.Product.Path)
		assert.Equal(t, 17, rec.Streamed, "ref-t2v streams every frame into the native path's encoder too")
		seeds[job], digests[job] = rec.Settings.Seed, rec.Product.SHA256
	}
	assert.Equal(t, map[string]int64{"a": 1, "b": 2}, seeds, "each job keeps its own fields")
	assert.NotEqual(t, digests["a"], digests["b"])
}

func TestTaskBatchErrorsNameTheProblem(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "batch.jsonl")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"with -set":     {[]string{"-batch", write(`{"out": "x"}`), "-set", "seed=1"}, "-batch replaces -out, -reference and -set"},
		"missing file":  {[]string{"-batch", filepath.Join(dir, "nope.jsonl")}, "nope.jsonl"},
		"empty":         {[]string{"-batch", write("\n")}, "no jobs"},
		"not json":      {[]string{"-batch", write("{\"out\": \"x\"}\nout=y\n")}, "batch.jsonl line 2:"},
		"unknown key":   {[]string{"-batch", write(`{"out": "x", "feilds": {}}`)}, `unknown field "feilds"`},
		"no out":        {[]string{"-batch", write(`{"fields": {}}`)}, `"out" is required`},
		"a layout":      {[]string{"-layout", "cfg-2", "-set", "prompt=p", "-out", filepath.Join(dir, "layout")}, "ref-t2v has no layout choice; layout cfg-2 cannot apply"},
		"a failing job": {[]string{"-batch", write(`{"out": "` + filepath.Join(dir, "ok") + `", "fields": {"prompt": "p"}}` + "\n" + `{"out": "` + filepath.Join(dir, "bad") + `", "fields": {"prompt": "p", "num_frames": "18"}}`)}, "batch job 2 (out " + filepath.Join(dir, "bad") + "): unsupported_value: ref-t2v cannot produce 18 frames"},
	} {
		t.Run(name, func(t *testing.T) {
			err := runTask(append([]string{"-model", "ref-t2v"}, c.args...), io.Discard, log)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	assert.FileExists(t, filepath.Join(dir, "ok", "actual.json"), "jobs before the failing one keep their output")
}
