package check

import (
	"fmt"
	"strings"

	"github.com/google/go-cmp/cmp"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Declaration is what a served model and its inventory row must agree on.
type Declaration struct {
	ID, Revision, Precision, Profile string
	Capabilities                     []string
}

// Declared is what /v1/models says of m.
func Declared(m api.Model) Declaration {
	return Declaration{ID: m.ID, Revision: m.Revision, Precision: m.Precision, Profile: m.Profile, Capabilities: m.Capabilities}
}

// Inventoried is what the inventory row c says.
func Inventoried(c spec.Checkpoint) Declaration {
	d := Declaration{ID: c.ID, Revision: c.Revision, Precision: c.Precision, Profile: c.Profile}
	for _, x := range c.Capabilities {
		d.Capabilities = append(d.Capabilities, string(x))
	}
	return d
}

// Reconcile is the check "reconcile": every model /v1/models declares must be a row of the
// inventory (found by lookup, e.g. models.Lookup) with the same revision, precision and
// profile and no capability the row lacks, and want must be served with its workload. A
// mismatch carries the cmp.Diff of the two declarations (-served +inventory).
func Reconcile(served []api.Model, lookup func(id string) (spec.Entry, error), want spec.Entry) error {
	found := false
	for _, m := range served {
		inv, err := lookup(m.ID)
		if err != nil {
			return fail("reconcile", "served model %s is not in the inventory", m.ID)
		}
		got, row := Declared(m), Inventoried(inv.Checkpoint)
		for _, c := range m.Capabilities {
			if !inv.Has(spec.Capability(c)) {
				return fail("reconcile", "%s declares %s, which its inventory row does not (-served +inventory):\n%s", m.ID, c, cmp.Diff(got, row))
			}
		}
		// Capabilities may be a subset here (want's workload is checked below); the identity
		// fields must be equal.
		got.Capabilities, row.Capabilities = nil, nil
		if d := cmp.Diff(got, row); d != "" {
			return fail("reconcile", "%s serves another revision, precision or profile than its inventory row (-served +inventory):\n%s", m.ID, d)
		}
		if m.ID == want.ID {
			found = true
			if !m.Has(string(want.Workload)) {
				return fail("reconcile", "%s does not declare %s; it declares %v", m.ID, want.Workload, m.Capabilities)
			}
		}
	}
	if !found {
		ids := make([]string, len(served))
		for i, m := range served {
			ids[i] = m.ID
		}
		return fail("reconcile", "%s is not served; served: [%s]", want.ID, strings.Join(ids, ", "))
	}
	return nil
}

// Produced is the part of a job that settings ask for and the server's actual reports.
type Produced struct {
	Size                  string
	NumFrames, FPS, Steps int
	Guidance              float64
	Seed                  int64
}

// Asked projects settings (the video object's settings, or the row's pinned settings through
// WireSettings) onto Produced.
func Asked(s api.Settings) Produced {
	return Produced{Size: s.Size, NumFrames: s.NumFrames, FPS: s.FPS, Steps: s.Steps, Guidance: s.Guidance, Seed: s.Seed}
}

// Reported projects what the server says it produced onto Produced.
func Reported(a api.Actual) Produced {
	return Produced{Size: fmt.Sprintf("%dx%d", a.Width, a.Height), NumFrames: a.NumFrames, FPS: a.FPS, Steps: a.Steps, Guidance: a.Guidance, Seed: a.Seed}
}

// WireSettings is the row's pinned settings as they travel on the wire.
func WireSettings(s spec.Settings) api.Settings {
	return api.Settings{Prompt: s.Prompt, NegativePrompt: s.NegativePrompt, Size: s.Size.String(), NumFrames: s.NumFrames,
		FPS: s.FPS, Steps: s.Steps, Guidance: s.Guidance, Seed: s.Seed}
}

// Settings is the check "actual-settings": the server's actual must report exactly what was
// asked, field by field; a setting the server ignored or changed shows in the cmp.Diff
// (-asked +actual). Floats compare exactly, so a NaN never equals anything.
func Settings(asked api.Settings, actual api.Actual) error {
	if d := cmp.Diff(Asked(asked), Reported(actual)); d != "" {
		return fail("actual-settings", "the server reports another job than was asked (-asked +actual):\n%s", d)
	}
	return nil
}
