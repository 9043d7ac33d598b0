// Command gpumatrix prints the GPU workflow's matrix, generated from the inventory: one shard
// per checkpoint that needs a GPU and has a native Task, with its GPU needs and the label of
// the self-hosted runner that meets them.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/internal/casegen"
	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Shard is one matrix entry.
type Shard struct {
	Checkpoint string `json:"checkpoint"`
	Test       string `json:"test"`
	Slug       string `json:"slug"` // safe in artifact names
	GPUs       int    `json:"gpus"`
	MemoryGB   int    `json:"memory_gb"`
	Runner     string `json:"runner"` // the self-hosted runner label for that many GPUs of that memory
}

// memoryClasses are the GPU memory sizes, in GB a card, that runner labels name: the cards'
// own (A100 40, H100 80, H200 141, B200 192). A runner carries the label of every class its
// cards hold (one H200: gpu-1x-40gb, gpu-1x-80gb and gpu-1x-141gb), and a shard asks for the
// smallest class that holds its row's MemoryGB.
var memoryClasses = []int{40, 80, 141, 192}

// runner is the label for g: gpu-<count>x-<class>gb.
func runner(g *spec.GPUNeeds) (string, error) {
	for _, c := range memoryClasses {
		if g.MemoryGB <= c {
			return fmt.Sprintf("gpu-%dx-%dgb", g.Count, c), nil
		}
	}
	return "", fmt.Errorf("%d GB a GPU is more than any runner class holds (%v GB)", g.MemoryGB, memoryClasses)
}

func shards() ([]Shard, error) {
	var out []Shard
	for _, e := range models.Inventory() {
		if e.GPU == nil || (e.NewTask == nil && len(e.Worker) == 0) {
			continue
		}
		label, err := runner(e.GPU)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.ID, err)
		}
		name := casegen.TestName(e.ID)
		out = append(out, Shard{Checkpoint: e.ID, Test: name, Slug: name[len("Test"):], GPUs: e.GPU.Count,
			MemoryGB: e.GPU.MemoryGB, Runner: label})
	}
	return out, nil
}

func main() {
	fs := flag.NewFlagSet("gpumatrix", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: go run ./cmd/gpumatrix

Prints the GPU workflow's matrix (.github/workflows/gpu.yml) as JSON, {"include": [shard...]}:
one shard per inventory row that needs a GPU and has a native Task, with the runner label
gpu-<GPUs>x-<GB>gb, GB the smallest of %v that holds the row's memory a GPU.
`, memoryClasses)
	}
	fs.Parse(os.Args[1:]) // exits 0 on -h, 2 on an unknown flag
	if fs.NArg() != 0 {
		fs.Usage()
		os.Exit(2)
	}
	s, err := shards()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpumatrix:", err)
		os.Exit(1)
	}
	b, err := json.Marshal(map[string][]Shard{"include": s})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(b))
}
