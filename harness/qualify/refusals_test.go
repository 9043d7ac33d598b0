package qualify

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Each setting the refusals send is outside the row's controls, one per control it declares.
func TestUnsupportedSettingsAreOutsideTheControls(t *testing.T) {
	for _, e := range models.Inventory() {
		if e.Status == spec.Excluded {
			continue
		}
		c := e.Controls
		rs := unsupportedSettings(e)
		want := 3
		if e.Workload == spec.TextToVideo {
			want = 5
		}
		require.Len(t, rs, want, e.ID)
		for _, r := range rs {
			switch r.field {
			case "size":
				s, err := spec.ParseSize(r.value)
				require.NoError(t, err, e.ID)
				assert.False(t, c.AllowsSize(s), "%s: %s", e.ID, r.value)
			case "num_inference_steps", "fps", "num_frames":
				n, err := strconv.Atoi(r.value)
				require.NoError(t, err, e.ID)
				switch r.field {
				case "num_inference_steps":
					assert.False(t, c.Steps.Contains(n), e.ID)
				case "fps":
					assert.False(t, c.AllowsFPS(n), e.ID)
				default:
					assert.False(t, c.Frames.Allows(n), e.ID)
				}
			case c.GuidanceParam:
				g, err := strconv.ParseFloat(r.value, 64)
				require.NoError(t, err, e.ID)
				assert.False(t, c.Guidance.Contains(g), e.ID)
			default:
				t.Errorf("%s: unexpected field %s", e.ID, r.field)
			}
		}
	}
}
