package spec

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLayoutDegree(t *testing.T) {
	for l, want := range map[Layout]int{
		"single": 1, "cfg-2": 2, "ulysses-2": 2, "ulysses-4": 4, "ulysses-16": 16,
		// Not layouts: degree 0, and Validate names the value and the forms.
		"": 0, "Single": 0, "cfg-4": 0, "cfg-1": 0, "ulysses-1": 0, "ulysses-0": 0, "ulysses-": 0,
		"ulysses-02": 0, "ulysses-+2": 0, "ulysses-2x": 0, "ulysses--2": 0, "ulysses-99999": 0, "ring-2": 0, " single": 0,
	} {
		assert.Equal(t, want, l.Degree(), "%q", l)
		err := l.Validate()
		if want > 0 {
			assert.NoError(t, err, "%q", l)
			continue
		}
		if assert.Error(t, err, "%q", l) {
			assert.Contains(t, err.Error(), `layout "`+string(l)+`" is not a layout`)
			assert.Contains(t, err.Error(), `"single", "cfg-2" or "ulysses-N" with N >= 2`)
		}
	}
}

// TestChooseLayout: an explicit layout must be offered and fit; otherwise the first offered
// that fits the visible GPUs; a row without layouts takes none.
func TestChooseLayout(t *testing.T) {
	cp := Checkpoint{ID: "row", Layouts: []Layout{"ulysses-4", "cfg-2", "single"}}
	for _, tc := range []struct {
		explicit Layout
		visible  string
		want     Layout
	}{
		{"", "", "single"},           // nothing visible: the first of degree 1
		{"", "3", "single"},          // 1 GPU
		{"", "0,1", "cfg-2"},         // 2 GPUs
		{"", " 0,1,2 ", "cfg-2"},     // 3 GPUs: ulysses-4 does not fit
		{"", "4,5,6,7", "ulysses-4"}, // 4 GPUs
		{"cfg-2", "0,1,2,3", "cfg-2"},
		{"single", "0,1,2,3", "single"},
		{"single", "", "single"},
	} {
		got, err := cp.ChooseLayout(tc.explicit, tc.visible)
		require.NoError(t, err, "%q on %q", tc.explicit, tc.visible)
		assert.Equal(t, tc.want, got, "%q on %q", tc.explicit, tc.visible)
	}

	_, err := cp.ChooseLayout("ulysses-2", "0,1")
	assert.EqualError(t, err, "row does not offer layout ulysses-2; its layouts: ulysses-4, cfg-2, single")
	_, err = cp.ChooseLayout("ulysses-x", "0,1")
	assert.ErrorContains(t, err, `layout "ulysses-x" is not a layout`)
	_, err = cp.ChooseLayout("ulysses-4", "0,1")
	assert.EqualError(t, err, "row: layout ulysses-4 needs 4 GPUs; CUDA_VISIBLE_DEVICES=0,1 names 2")
	_, err = cp.ChooseLayout("cfg-2", "")
	assert.EqualError(t, err, "row: layout cfg-2 needs 2 GPUs; CUDA_VISIBLE_DEVICES is unset, which counts as one GPU")

	// None fits: the error names the GPUs the smallest layout needs.
	multi := Checkpoint{ID: "big", Layouts: []Layout{"ulysses-4", "ulysses-2"}}
	_, err = multi.ChooseLayout("", "0")
	assert.EqualError(t, err, "big needs at least 2 GPUs for any of its layouts (ulysses-4, ulysses-2); CUDA_VISIBLE_DEVICES=0 names 1")
	_, err = multi.ChooseLayout("", "")
	assert.ErrorContains(t, err, "big needs at least 2 GPUs")
	got, err := multi.ChooseLayout("", "0,1,2")
	require.NoError(t, err)
	assert.Equal(t, Layout("ulysses-2"), got)

	none := Checkpoint{ID: "ref"}
	got, err = none.ChooseLayout("", "0,1")
	require.NoError(t, err)
	assert.Empty(t, got)
	_, err = none.ChooseLayout("single", "0")
	assert.EqualError(t, err, "ref has no layout choice; layout single cannot apply")
}
