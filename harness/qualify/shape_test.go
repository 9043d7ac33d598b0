package qualify

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
)

// The shape probe asks for another shape at the fewest steps each row allows: a video row's
// other size and smallest other frame count, MiniMax-H3's other frame count alone (it offers
// one size), an edit row its pinned output (its other shape is the reference's).
func TestProbeSettings(t *testing.T) {
	for id, want := range map[string]spec.Size{
		"Wan-AI/Wan2.1-T2V-1.3B":    {W: 480, H: 832},
		"Wan-AI/Wan2.2-TI2V-5B":     {W: 704, H: 1280},
		"MiniMaxAI/MiniMax-H3":      {W: 1344, H: 768},
		"Qwen/Qwen-Image-Edit-2511": {W: 1024, H: 1024},
	} {
		e, err := models.Lookup(id)
		require.NoError(t, err)
		st, ok := probeSettings(e)
		require.True(t, ok, id)
		assert.Equal(t, want, st.Size, id)
		assert.Equal(t, e.Controls.Steps.Min, st.Steps, id)
		assert.Less(t, st.Steps, e.Defaults.Steps, id)
		if e.Workload == spec.TextToVideo {
			assert.True(t, e.Controls.Frames.Allows(st.NumFrames), id)
			assert.NotEqual(t, e.Defaults.NumFrames, st.NumFrames, id)
		}
	}
	e, err := models.Lookup("MiniMaxAI/MiniMax-H3")
	require.NoError(t, err)
	st, _ := probeSettings(e)
	assert.Equal(t, 141, st.NumFrames, "the next 17n+5 count after the pinned 124")

	// One size and one frame count: no other shape to ask for.
	e.Controls.Frames = &spec.FrameRule{Step: 1, Range: spec.IntRange{Min: 124, Max: 124}}
	_, ok := probeSettings(e)
	assert.False(t, ok)
}
