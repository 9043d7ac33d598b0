package spec

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseSize(t *testing.T) {
	for in, ok := range map[string]bool{"832x480": true, "1x1": true, "0x5": false, "-1x5": false, "5x": false,
		"x5": false, "5X5": false, "5x5x5": false, "00320x192": false, "320x0192": false, " 5x5": false, "+5x5": false, "999999x1": false, "": false} {
		_, err := ParseSize(in)
		assert.Equal(t, ok, err == nil, in)
	}
}

func TestFrameRule(t *testing.T) {
	r := FrameRule{Step: 4, Offset: 1, Range: IntRange{Min: 5, Max: 81}}
	assert.True(t, r.Allows(17))
	assert.False(t, r.Allows(16))
	assert.False(t, r.Allows(1))
	assert.False(t, r.Allows(85))
	assert.Equal(t, "4k+1 in 5..81", r.String())
}

func TestFieldsNamesGuidanceByControl(t *testing.T) {
	s := Settings{Prompt: "p", Size: Size{8, 8}, Steps: 3, Guidance: 4, Seed: 1, NegativePrompt: " ", NumFrames: 5, FPS: 8}
	f := s.Fields(Controls{GuidanceParam: "true_cfg_scale", NegativePrompt: true}, ImageEdit)
	assert.Equal(t, map[string]string{"prompt": "p", "size": "8x8", "num_inference_steps": "3", "true_cfg_scale": "4",
		"seed": "1", "negative_prompt": " "}, f)
	f = s.Fields(Controls{GuidanceParam: "guidance_scale"}, TextToVideo)
	assert.Equal(t, "5", f["num_frames"])
	assert.NotContains(t, f, "negative_prompt")
}
