// Package models is the inventory: every checkpoint mediaqual knows, whatever its state. It is
// the only package that imports every family; families import only models/spec.
package models

import (
	"fmt"

	"github.com/mediaqual/mediaqual/models/minimax"
	"github.com/mediaqual/mediaqual/models/qwenimage"
	"github.com/mediaqual/mediaqual/models/reference"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/models/wan"
)

// Inventory returns every row in a stable order: reference families first, then the seed
// groups.
func Inventory() []spec.Entry {
	var all []spec.Entry
	all = append(all, reference.Entries()...)
	all = append(all, wan.Entries()...)
	all = append(all, minimax.Entries()...)
	all = append(all, excluded()...)
	all = append(all, qwenimage.Entries()...)
	return all
}

// excluded rows are listed so the inventory is complete; no family code exists for them.
func excluded() []spec.Entry {
	row := func(id, family string) spec.Entry {
		return spec.Entry{
			Checkpoint: spec.Checkpoint{ID: id, Family: family, Profile: "partial/L0",
				Capabilities: []spec.Capability{spec.TextToVideo}},
			Workload: spec.TextToVideo, NativeTask: "none", Status: spec.Excluded,
			Note: "excluded: partial/L0 profile only", Fixtures: "t2v-prompts",
		}
	}
	return []spec.Entry{row("nvidia/Cosmos3-Nano", "cosmos"), row("Lightricks/LTX-Video", "ltx")}
}

// Servable returns the checkpoints mediaserve can serve: those with a Task.
func Servable() []spec.Checkpoint {
	var out []spec.Checkpoint
	for _, e := range Inventory() {
		if e.NewTask != nil || len(e.Worker) > 0 {
			out = append(out, e.Checkpoint)
		}
	}
	return out
}

// Lookup finds an inventory row by checkpoint id.
func Lookup(id string) (spec.Entry, error) {
	var ids []string
	for _, e := range Inventory() {
		if e.ID == id {
			return e, nil
		}
		ids = append(ids, e.ID)
	}
	return spec.Entry{}, fmt.Errorf("unknown checkpoint %q; known: %v", id, ids)
}
