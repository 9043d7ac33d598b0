package qualify

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
)

// bundleFacts is what the inventory stage established about the weights: the revision the bundle
// states ("" for a row without a bundle, or a bundle that states none).
type bundleFacts struct {
	Commit string
}

// inventory is the stage "inventory": the row is complete; for a GPU row, its bundle is
// there, holds the row's revision and the GPUs are named. Nothing has loaded yet.
func (c *caseRun) inventory() (bundleFacts, string, error) {
	var b bundleFacts
	e := c.Entry
	if p := e.Problems(); len(p) > 0 {
		return b, "", check.Fail("inventory-row", "%s", strings.Join(p, "; "))
	}
	revision := ""
	if e.GPU != nil && c.Config.Target.External() && bundle.Missing(e) != "" {
		// The endpoint serves its own weights: nothing here loads them, and correctness and
		// identity, which would need them, do not run.
		revision = "; no local bundle (" + bundle.Missing(e) + "): the endpoint's weights are its own, correctness and identity do not run"
	} else if e.GPU != nil {
		if why := bundle.Missing(e); why != "" {
			return b, "", check.Fail("gpu-environment", "%s", why)
		}
		// A bundle of random weights proves mechanics and timing only; every report says so.
		if bundle.IsL0(bundle.Dir(e)) {
			c.Row.Profile = "L0-random"
			c.Row.Label = reports.Label(c.Row.Profile)
			c.limit(spec.Implemented, "L0-random weights prove mechanics and timing only")
		}
		// The weights are identified before anything loads them.
		var err error
		if b, revision, err = c.revision(); err != nil {
			return b, "", err
		}
		if err := GPUPreCheck(e, c.Config); err != nil {
			return b, "", err
		}
	}
	if e.Status == spec.Excluded {
		return b, e.Note, nil
	}
	if e.NewTask == nil && len(e.Worker) == 0 && !c.Config.Target.External() {
		return b, "", check.Fail("inventory-task", "%s is %s and has no native Task to run (%s)", e.ID, e.Status, e.Note)
	}
	return b, fmt.Sprintf("row complete; status %s%s; reconciled against /v1/models in serve", e.Status, revision), nil
}

// GPUPreCheck says exactly what a GPU run is missing, before anything starts (check
// gpu-environment): the weights, and GPUs enough for the row's needs and for the layout it
// will run (MEDIAQUAL_LAYOUT, or its first that fits). An external endpoint brings its own
// GPUs and weights.
func GPUPreCheck(e spec.Entry, cfg Config) error {
	if cfg.Target.External() {
		return nil // its GPUs and its weights are the endpoint's
	}
	if why := bundle.Missing(e); why != "" {
		return check.Fail("gpu-environment", "%s needs its weights: %s", e.ID, why)
	}
	if cfg.GPUs == "" {
		need, layout := e.GPU.Count, ""
		if len(e.Layouts) > 0 {
			l, which := cfg.Layout, "MEDIAQUAL_LAYOUT"
			if l == "" {
				l, which = e.Layouts[0], "its preferred layout"
			}
			need, layout = max(need, l.Degree()), fmt.Sprintf("; %s %s takes %d", which, l, l.Degree())
		}
		return check.Fail("gpu-environment", "set MEDIAQUAL_GPUS to the CUDA device ids for %s (needs %d GPU(s) with %d GB each%s)", e.ID, need, e.GPU.MemoryGB, layout)
	}
	if len(e.Layouts) > 0 {
		// The layout the run will choose must fit: at least its degree of GPUs.
		if _, err := e.ChooseLayout(cfg.Layout, cfg.GPUs); err != nil {
			return check.Fail("gpu-environment", "%w (MEDIAQUAL_GPUS, MEDIAQUAL_LAYOUT)", err)
		}
	} else if n := len(strings.Split(cfg.GPUs, ",")); n < e.GPU.Count {
		return check.Fail("gpu-environment", "%s needs %d GPU(s); MEDIAQUAL_GPUS=%s names %d", e.ID, e.GPU.Count, cfg.GPUs, n)
	}
	return nil
}

// revision holds the commit the bundle states to the row's revision (check bundle-revision).
// A row without a revision runs, but can earn no more than implemented; an L0-random bundle
// is no revision's weights, so it is not held to one.
func (c *caseRun) revision() (bundleFacts, string, error) {
	dir, want := bundle.Dir(c.Entry), c.Entry.Revision
	commit, source, err := bundle.Revision(dir)
	if err != nil {
		return bundleFacts{}, "", check.Fail("bundle-revision", "%w", err)
	}
	b := bundleFacts{Commit: commit}
	switch {
	case bundle.IsL0(dir) && commit == "":
		return b, "; L0-random bundle: no revision to check", nil
	case want == "":
		stated := "states none either"
		if commit != "" {
			stated = "holds " + commit + " (" + source + ")"
		}
		c.limit(spec.Implemented, "the row pins no revision (the bundle "+stated+"): nobody pinned these weights")
		return b, "; the row pins no revision, the bundle " + stated, nil
	}
	if err := check.Revision(want, commit, source); err != nil {
		return b, "", err
	}
	return b, fmt.Sprintf("; bundle revision %s matches the row's %s", commit, want), nil
}

// publishedDigest holds the bundle's digest to the one a published qualification of the same
// revision on real weights recorded (check bundle-digest), and says what it compared.
func (c *caseRun) publishedDigest(b bundleFacts, sum string) (string, error) {
	if b.Commit == "" || c.Row.Profile != "full" {
		return "", nil
	}
	rows, from, skipped, err := reports.Published(filepath.Join(c.Config.Root, "reports", "published"))
	if err != nil {
		return "", err
	}
	var note string // a malformed published run is another run's fault: said, not failed
	for _, s := range skipped {
		note += "; skipped " + s
	}
	for i, r := range rows {
		if r.Checkpoint == c.Entry.ID && r.Profile == "full" && r.Bundle["revision"] == b.Commit {
			if err := check.BundleDigest(sum, r.Bundle["sha256"], from[i]); err != nil {
				return "", err
			}
			return "; bundle digest equals " + from[i] + "'s" + note, nil
		}
	}
	return "; no published qualification of revision " + b.Commit + " to compare the bundle digest with" + note, nil
}
