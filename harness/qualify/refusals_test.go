package qualify

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/wire"
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

// An accepted setting is held to what the output shows (size, frames, fps) or, for steps and
// guidance, to the actual the server reports: a silent change is told from an honoured one,
// and what cannot be seen is said (issue #39).
func TestHeldTo(t *testing.T) {
	o := observed{size: "320x192", frames: 17, fps: "16"}
	for _, tc := range []struct {
		r                 refusal
		a                 api.Actual
		reported          bool
		honoured, changed bool
	}{
		{refusal{"size", "320x192"}, api.Actual{}, false, true, false},
		{refusal{"size", "336x192"}, api.Actual{}, false, false, true}, // clamped to 320x192
		{refusal{"num_frames", "17"}, api.Actual{}, false, true, false},
		{refusal{"num_frames", "18"}, api.Actual{}, false, false, true},
		{refusal{"fps", "25"}, api.Actual{}, false, false, true},
		{refusal{"num_inference_steps", "51"}, api.Actual{Steps: 51}, true, true, false},
		{refusal{"num_inference_steps", "51"}, api.Actual{Steps: 50}, true, false, true},
		{refusal{"num_inference_steps", "51"}, api.Actual{}, false, false, false}, // cannot be told
		{refusal{"guidance_scale", "21"}, api.Actual{Guidance: 21}, true, true, false},
	} {
		outcome, changed := heldTo(tc.r, o, tc.a, tc.reported)
		assert.Equal(t, tc.changed, changed != "", "%v: %q", tc.r, changed)
		assert.Equal(t, tc.honoured, strings.HasPrefix(outcome, "honoured"), "%v: %q", tc.r, outcome)
		if !tc.honoured && !tc.changed {
			assert.Contains(t, outcome, "cannot be told", "%v", tc.r)
		}
	}
}

// The error-shape probe goes to the row's own route: an edit row's server may serve no video
// route (issue #38).
func TestErrorProbeRoute(t *testing.T) {
	m, p := errorProbeRoute(wire.SGLang, spec.ImageEdit)
	assert.Equal(t, "POST /v1/images/edits", m+" "+p)
	m, p = errorProbeRoute(wire.VLLMOmni, spec.TextToVideo)
	assert.Equal(t, "POST /v1/videos", m+" "+p)
}
