// Package models lists every checkpoint mediaqual knows. It is the only package that imports
// every family; families import only models/spec.
package models

import (
	"fmt"

	"mediaqual/models/reference"
	"mediaqual/models/spec"
)

// Servable returns every checkpoint mediaserve can serve, in a stable order.
func Servable() []spec.Checkpoint {
	return reference.Checkpoints()
}

// Lookup finds a servable checkpoint by id.
func Lookup(id string) (spec.Checkpoint, error) {
	var ids []string
	for _, cp := range Servable() {
		if cp.ID == id {
			return cp, nil
		}
		ids = append(ids, cp.ID)
	}
	return spec.Checkpoint{}, fmt.Errorf("unknown model %q; known: %v", id, ids)
}
