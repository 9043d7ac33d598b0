package server

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mediaqual/mediaqual/models/spec"
)

// Generation fields each workload accepts. Route-level fields (model, n, response_format,
// output_format) are consumed by the handlers before Resolve sees the rest.
var (
	videoFields = []string{"prompt", "size", "seconds", "fps", "num_frames", "num_inference_steps",
		"guidance_scale", "true_cfg_scale", "negative_prompt", "seed"}
	editFields = []string{"prompt", "size", "num_inference_steps", "guidance_scale", "true_cfg_scale",
		"negative_prompt", "seed"}
)

// maxPromptChars bounds prompt and negative_prompt, each. Every other text field is bounded by
// its syntax and, before that, by the form's maxFieldBytes; so a worker's run line stays far
// below the protocol's 1 MiB (two prompts of 32000 characters, each escaped in at most 6 bytes).
const maxPromptChars = 32000

// Resolve turns request fields into complete Settings for cp and capability, or names what is
// wrong. Every field is either honoured exactly or rejected; an absent field takes the
// checkpoint's pinned default. refSize is the reference image's size for image_edit ("auto").
//
// Frame count for text_to_video: num_frames when given; otherwise seconds*fps when that is a
// whole frame count the model can produce; otherwise the default. When both are given they must
// agree exactly (num_frames = seconds*fps). fps defaults to the checkpoint's pinned fps.
func Resolve(cp spec.Checkpoint, capability spec.Capability, fields map[string]string, refSize *spec.Size) (spec.Settings, *apiError) {
	allowed := editFields
	if capability == spec.TextToVideo {
		allowed = videoFields
	}
	for _, k := range sortedKeys(fields) {
		if !slices.Contains(allowed, k) {
			return spec.Settings{}, unsupportedParam(k, "unknown parameter %q; accepted: model, %s", k, strings.Join(allowed, ", "))
		}
	}
	c := cp.Controls
	s := cp.Defaults
	s.Prompt = fields["prompt"]
	if strings.TrimSpace(s.Prompt) == "" {
		return s, invalid("prompt", "prompt is required")
	}
	for _, p := range []string{"prompt", "negative_prompt"} {
		if n := utf8.RuneCountInString(fields[p]); n > maxPromptChars {
			return s, invalid(p, "%s has %d characters; at most %d are accepted", p, n, maxPromptChars)
		}
	}
	if v, ok := fields["negative_prompt"]; ok {
		if !c.NegativePrompt {
			return s, unsupportedParam("negative_prompt", "%s does not support negative_prompt", cp.ID)
		}
		s.NegativePrompt = v
	}

	switch v, ok := fields["size"]; {
	case !ok: // the pinned default
	case v == "auto" && c.AutoSize && refSize != nil:
		s.Size = *refSize // any reference size: "auto" promises the reference's own size
	default:
		sz, err := spec.ParseSize(v)
		if err != nil {
			return s, invalid("size", "%v", err)
		}
		if !c.AllowsSize(sz) {
			return s, unsupportedValue("size", "%s does not support size %s; supported: %s%s", cp.ID, v, sizeList(c.Sizes), autoNote(c))
		}
		s.Size = sz
	}

	var err *apiError
	if s.Steps, err = intField(fields, "num_inference_steps", s.Steps); err != nil {
		return s, err
	}
	if !c.Steps.Contains(s.Steps) {
		return s, unsupportedValue("num_inference_steps", "%s supports num_inference_steps in %s, got %d", cp.ID, c.Steps, s.Steps)
	}
	for _, p := range []string{"guidance_scale", "true_cfg_scale"} {
		if _, ok := fields[p]; ok && p != c.GuidanceParam {
			return s, unsupportedParam(p, "%s takes guidance as %s, not %s", cp.ID, c.GuidanceParam, p)
		}
	}
	if s.Guidance, err = floatField(fields, c.GuidanceParam, s.Guidance); err != nil {
		return s, err
	}
	if !c.Guidance.Contains(s.Guidance) {
		return s, unsupportedValue(c.GuidanceParam, "%s supports %s in %s, got %g", cp.ID, c.GuidanceParam, c.Guidance, s.Guidance)
	}
	seed, err := intField(fields, "seed", int(s.Seed))
	if err != nil && err.Code == "unsupported_value" { // beyond int64: say the range, as for seed < 0
		return s, unsupportedValue("seed", "seed must be in 0..%d, got %s", math.MaxInt64, strings.TrimSpace(fields["seed"]))
	}
	if err != nil {
		return s, err
	}
	if seed < 0 {
		return s, unsupportedValue("seed", "seed must be in 0..%d, got %d", math.MaxInt64, seed)
	}
	s.Seed = int64(seed)

	if capability == spec.TextToVideo {
		if err := resolveFrames(cp, fields, &s); err != nil {
			return s, err
		}
	} else {
		s.NumFrames, s.FPS = 0, 0
	}
	return s, nil
}

func resolveFrames(cp spec.Checkpoint, fields map[string]string, s *spec.Settings) *apiError {
	c := cp.Controls
	var err *apiError
	if s.FPS, err = intField(fields, "fps", s.FPS); err != nil {
		return err
	}
	if !c.AllowsFPS(s.FPS) {
		return unsupportedValue("fps", "%s supports fps %v, got %d", cp.ID, c.FPS, s.FPS)
	}
	_, hasFrames := fields["num_frames"]
	if s.NumFrames, err = intField(fields, "num_frames", s.NumFrames); err != nil {
		return err
	}
	if v, ok := fields["seconds"]; ok {
		sec, perr := parseDecimal(v)
		if perr != nil || sec <= 0 {
			return invalid("seconds", "seconds must be a positive number, got %q", v)
		}
		n := sec * float64(s.FPS)
		whole := math.Abs(n-math.Round(n)) < 1e-6
		switch {
		case n > maxFrameCount: // int(n) would overflow; no model produces this many frames
			return unsupportedValue("seconds", "seconds=%s at %d fps is %g frames; %s", v, s.FPS, n, frameHint(c, s.FPS))
		case hasFrames && (!whole || int(math.Round(n)) != s.NumFrames):
			return unsupportedValue("seconds", "seconds=%s at %d fps is %g frames but num_frames=%d; give one of them or make them agree", v, s.FPS, n, s.NumFrames)
		case !whole:
			return unsupportedValue("seconds", "seconds=%s at %d fps is %g frames, not a whole frame count; %s", v, s.FPS, n, frameHint(c, s.FPS))
		}
		s.NumFrames = int(math.Round(n))
	}
	if c.Frames == nil || !c.Frames.Allows(s.NumFrames) {
		param := "num_frames"
		if !hasFrames && fields["seconds"] != "" {
			param = "seconds"
		}
		return unsupportedValue(param, "%s cannot produce %d frames; %s", cp.ID, s.NumFrames, frameHint(c, s.FPS))
	}
	return nil
}

func frameHint(c spec.Controls, fps int) string {
	if c.Frames == nil {
		return "this model does not produce video"
	}
	return fmt.Sprintf("supported frame counts: %s (duration = num_frames / fps, fps %d)", c.Frames, fps)
}

// maxFrameCount bounds seconds*fps before it is converted to a frame count.
const maxFrameCount = 1 << 31

// decimalNumber is the syntax of numeric fields: a JSON number, optionally signed with '+'
// (surrounding spaces are trimmed first). strconv.ParseFloat alone would also take hex floats
// ("0x1p2"), digit separators ("1_0" after a prefix) and "Inf"; a client that sends those did
// not mean a number, so they are rejected rather than honoured by accident.
var decimalNumber = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// parseDecimal parses a finite decimal number.
func parseDecimal(v string) (float64, error) {
	v = strings.TrimSpace(v)
	if !decimalNumber.MatchString(v) {
		return 0, fmt.Errorf("%q is not a decimal number", v)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a finite number", v)
	}
	return f, nil
}

func intField(fields map[string]string, name string, def int) (int, *apiError) {
	v, ok := fields[name]
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, unsupportedValue(name, "%s=%s is out of range (a 64-bit integer)", name, strings.TrimSpace(v))
	}
	if err != nil {
		return 0, invalid(name, "%s must be an integer, got %q", name, v)
	}
	return int(n), nil
}

func floatField(fields map[string]string, name string, def float64) (float64, *apiError) {
	v, ok := fields[name]
	if !ok {
		return def, nil
	}
	f, err := parseDecimal(v)
	if err != nil {
		return 0, invalid(name, "%s must be a finite decimal number, got %q", name, v)
	}
	return f, nil
}

func sizeList(sizes []spec.Size) string {
	out := make([]string, len(sizes))
	for i, s := range sizes {
		out[i] = s.String()
	}
	return strings.Join(out, ", ")
}

func autoNote(c spec.Controls) string {
	if c.AutoSize {
		return ", or auto (the reference's size)"
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
