// Command gpumatrix prints the GPU workflow's matrix, generated from the inventory: one shard
// per checkpoint that needs a GPU and has a native Task, with its GPU needs.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/internal/casegen"
	"github.com/mediaqual/mediaqual/models"
)

// Shard is one matrix entry.
type Shard struct {
	Checkpoint string `json:"checkpoint"`
	Test       string `json:"test"`
	Slug       string `json:"slug"` // safe in artifact names
	GPUs       int    `json:"gpus"`
	MemoryGB   int    `json:"memory_gb"`
	Runner     string `json:"runner"` // the self-hosted runner label for that many GPUs
}

func shards() []Shard {
	var out []Shard
	for _, e := range models.Inventory() {
		if e.GPU == nil || (e.NewTask == nil && len(e.Worker) == 0) {
			continue
		}
		name := casegen.TestName(e.ID)
		out = append(out, Shard{Checkpoint: e.ID, Test: name, Slug: name[len("Test"):], GPUs: e.GPU.Count,
			MemoryGB: e.GPU.MemoryGB, Runner: fmt.Sprintf("gpu-%dx", e.GPU.Count)})
	}
	return out
}

func main() {
	b, err := json.Marshal(map[string][]Shard{"include": shards()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(b))
}
