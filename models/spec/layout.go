package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Layout is how one Task spreads over GPUs. Its degree is how many GPUs it takes, so a lane
// of that layout owns that many of CUDA_VISIBLE_DEVICES' ids.
//
//	single     one GPU (degree 1)
//	cfg-2      the two classifier-free-guidance branches on two GPUs (degree 2)
//	ulysses-N  diffusers' Ulysses context parallelism over N >= 2 GPUs (degree N)
type Layout string

// LayoutSingle is the one-GPU layout.
const LayoutSingle Layout = "single"

const layoutForms = `"single", "cfg-2" or "ulysses-N" with N >= 2`

// Degree is how many GPUs the layout takes; 0 for a value that is not a layout.
func (l Layout) Degree() int {
	switch {
	case l == LayoutSingle:
		return 1
	case l == "cfg-2":
		return 2
	case strings.HasPrefix(string(l), "ulysses-"):
		n := strings.TrimPrefix(string(l), "ulysses-")
		// Canonical decimal only, as for sizes: "ulysses-02" is no layout anyone means.
		if n == "" || n[0] == '0' || len(n) > 4 || strings.TrimLeft(n, "0123456789") != "" {
			return 0
		}
		if d, err := strconv.Atoi(n); err == nil && d >= 2 {
			return d
		}
	}
	return 0
}

// Validate says whether l is one of the layout forms, naming the bad value and the forms.
func (l Layout) Validate() error {
	if l.Degree() == 0 {
		return fmt.Errorf("layout %q is not a layout: want %s", string(l), layoutForms)
	}
	return nil
}

// ChooseLayout is the layout c's Task runs when explicit (mediaserve -layout; "" for none)
// is asked for and visible (CUDA_VISIBLE_DEVICES, comma-separated ids; "" when unset) names
// the GPUs. An explicit layout must be one of c.Layouts and fit the visible GPUs; otherwise
// it is the first of c.Layouts that fits (with nothing visible, the first of degree 1: the
// worker then takes whatever GPU it finds). A row without Layouts has no choice and accepts
// only "", which it returns.
func (c Checkpoint) ChooseLayout(explicit Layout, visible string) (Layout, error) {
	gpus, have := 1, "CUDA_VISIBLE_DEVICES is unset, which counts as one GPU"
	if v := strings.TrimSpace(visible); v != "" {
		gpus = len(strings.Split(v, ","))
		have = fmt.Sprintf("CUDA_VISIBLE_DEVICES=%s names %d", v, gpus)
	}
	if len(c.Layouts) == 0 {
		if explicit != "" {
			return "", fmt.Errorf("%s has no layout choice; layout %s cannot apply", c.ID, explicit)
		}
		return "", nil
	}
	if explicit != "" {
		if err := explicit.Validate(); err != nil {
			return "", err
		}
		if !slices.Contains(c.Layouts, explicit) {
			return "", fmt.Errorf("%s does not offer layout %s; its layouts: %s", c.ID, explicit, joinLayouts(c.Layouts))
		}
		if d := explicit.Degree(); d > gpus {
			return "", fmt.Errorf("%s: layout %s needs %d GPUs; %s", c.ID, explicit, d, have)
		}
		return explicit, nil
	}
	least := 0
	for _, l := range c.Layouts {
		d := l.Degree()
		if d > 0 && d <= gpus {
			return l, nil
		}
		if d > 0 && (least == 0 || d < least) {
			least = d
		}
	}
	return "", fmt.Errorf("%s needs at least %d GPUs for any of its layouts (%s); %s", c.ID, least, joinLayouts(c.Layouts), have)
}

func joinLayouts(ls []Layout) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = string(l)
	}
	return strings.Join(s, ", ")
}
