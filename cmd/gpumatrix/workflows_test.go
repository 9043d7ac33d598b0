package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mediaqual/mediaqual/models/spec"
)

type workflow struct {
	Name string         `yaml:"name"`
	On   map[string]any `yaml:"on"`
	Jobs map[string]struct {
		Needs    any            `yaml:"needs"`
		RunsOn   any            `yaml:"runs-on"`
		Strategy map[string]any `yaml:"strategy"`
		Steps    []struct {
			Uses string `yaml:"uses"`
			Run  string `yaml:"run"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

func load(t *testing.T, name string) (workflow, string) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".github", "workflows", name))
	require.NoError(t, err)
	var w workflow
	require.NoError(t, yaml.Unmarshal(b, &w), name)
	return w, string(b)
}

// TestWorkflowsAreConsistent validates the workflow files against the repository: every job
// a job needs exists, every make target and go run path they call exists, actions are pinned,
// and every matrix field they use is one the generator emits.
func TestWorkflowsAreConsistent(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	for _, name := range []string{"ci.yml", "gpu.yml"} {
		w, text := load(t, name)
		require.NotEmpty(t, w.Name, name)
		require.NotEmpty(t, w.On, name)
		require.NotEmpty(t, w.Jobs, name)
		for job, j := range w.Jobs {
			require.NotNil(t, j.RunsOn, "%s: job %s has no runs-on", name, job)
			var needs []string
			switch n := j.Needs.(type) {
			case string:
				needs = []string{n}
			case []any:
				for _, x := range n {
					needs = append(needs, x.(string))
				}
			}
			for _, n := range needs {
				assert.Contains(t, w.Jobs, n, "%s: job %s needs unknown job %s", name, job, n)
			}
			for _, s := range j.Steps {
				if s.Uses != "" {
					assert.Regexp(t, `^[\w-]+/[\w-]+@v\d+$`, s.Uses, "%s: pin actions to a major version", name)
				}
				for _, m := range regexp.MustCompile(`make (\w+)`).FindAllStringSubmatch(s.Run, -1) {
					assert.Regexp(t, "(?m)^"+m[1]+":", string(makefile), "%s: make %s has no target", name, m[1])
				}
				for _, m := range regexp.MustCompile(`go run (\./[\w/]+)`).FindAllStringSubmatch(s.Run, -1) {
					_, err := os.Stat(filepath.Join("..", "..", m[1]))
					assert.NoError(t, err, "%s: go run %s", name, m[1])
				}
			}
		}
		if name == "gpu.yml" {
			s, err := shards()
			require.NoError(t, err)
			b, err := json.Marshal(map[string][]Shard{"include": s})
			require.NoError(t, err)
			var gen struct{ Include []map[string]any }
			require.NoError(t, json.Unmarshal(b, &gen))
			require.NotEmpty(t, gen.Include, "no GPU shard: the GPU workflow would qualify nothing")
			for _, m := range regexp.MustCompile(`[^.\w]matrix\.(\w+)`).FindAllStringSubmatch(text, -1) {
				assert.Contains(t, gen.Include[0], m[1], "gpu.yml uses matrix.%s, which the generator does not emit", m[1])
			}
			assert.Contains(t, text, "go run ./cmd/gpumatrix")
			assert.Contains(t, text, "go run ./cmd/mergereports")
		}
	}
}

func TestMatrixHasEveryRunnableGPUCheckpoint(t *testing.T) {
	s, err := shards()
	require.NoError(t, err)
	require.NotEmpty(t, s)
	runners := map[string]string{}
	for _, sh := range s {
		assert.True(t, strings.HasPrefix(sh.Test, "Test"))
		assert.Positive(t, sh.MemoryGB)
		runners[sh.Checkpoint] = sh.Runner
	}
	assert.Equal(t, "Wan-AI/Wan2.1-T2V-1.3B", s[0].Checkpoint)
	// Each row on the smallest card that holds it: MiniMax-H3's 140 GB a GPU not on an 80 GB one.
	assert.Equal(t, map[string]string{"Wan-AI/Wan2.1-T2V-1.3B": "gpu-1x-40gb", "Wan-AI/Wan2.2-TI2V-5B": "gpu-1x-80gb",
		"Qwen/Qwen-Image-Edit-2511": "gpu-1x-80gb", "MiniMaxAI/MiniMax-H3": "gpu-1x-141gb"}, runners)
}

func TestRunnerLabelHoldsTheRow(t *testing.T) {
	for need, want := range map[int]string{1: "gpu-2x-40gb", 40: "gpu-2x-40gb", 41: "gpu-2x-80gb", 141: "gpu-2x-141gb", 192: "gpu-2x-192gb"} {
		got, err := runner(&spec.GPUNeeds{Count: 2, MemoryGB: need})
		require.NoError(t, err)
		assert.Equal(t, want, got, "%d GB", need)
	}
	_, err := runner(&spec.GPUNeeds{Count: 1, MemoryGB: 193})
	assert.ErrorContains(t, err, "193 GB a GPU is more than any runner class holds")
}
