package server_test

// Fuzz tests. `go test ./server/` (and so CI) runs every seed below and every input saved under
// testdata/fuzz/<FuzzName>/ as an ordinary test; fuzzing itself is explicit, e.g.
//
//	go test -run '^$' -fuzz '^FuzzReadForm$' -fuzztime 30s ./server/
//	go test -run '^$' -fuzz '^FuzzResolve$' -fuzztime 30s ./server/
//
// A crasher the fuzzer finds is written to testdata/fuzz/; keep it there (after fixing the bug)
// so that it stays a regression test.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediaqual/mediaqual/models/reference"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server"
)

// fuzzServer serves the reference checkpoints' controls without their cost: ref-t2v's Task
// never runs (its lane fills and answers 429), ref-edit's returns at once. No ffmpeg runs.
func fuzzServer(f *testing.F) http.Handler {
	var models []server.Model
	for _, cp := range reference.Checkpoints() {
		switch {
		case cp.Has(spec.TextToVideo):
			models = append(models, server.Model{Checkpoint: cp, Task: &fakeTask{gate: make(chan struct{})}})
		case cp.Has(spec.ImageEdit):
			models = append(models, server.Model{Checkpoint: cp, Task: &fakeTask{}})
		}
	}
	srv, err := server.New(server.Config{Models: models, ArtifactDir: f.TempDir(), QueueCapacity: 2,
		MaxBodyBytes: 1 << 20, MaxPixels: 64 * 64, Lifetime: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	if err := srv.Load(f.Context()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	return srv.Handler()
}

// FuzzReadForm posts arbitrary bodies under arbitrary Content-Types to both create routes:
// nothing panics, nothing answers 5xx, and every answer is a JSON object (an error envelope
// with code, type and message for every 4xx).
func FuzzReadForm(f *testing.F) {
	h := fuzzServer(f)
	ref := pngBytes(f, 24, 16, color.RGBA{200, 30, 60, 255})
	aiperf := vid("size", "320x192", "seconds", "1.0625", "fps", "16", "num_frames", "17",
		"num_inference_steps", "4", "guidance_scale", "5.0", "seed", "42")
	f.Add(false, aiperf.ct, aiperf.body)
	f.Add(false, "application/json", []byte(`{"model":"ref-t2v","prompt":"a cat","size":"320x192","num_frames":17,"fps":16,"seed":"3"}`))
	f.Add(false, "application/json", []byte(`{"model":"ref-t2v","prompt":"a","prompt":"b","extra":{"x":[1,{"y":null}]}}`))
	for _, p := range []payload{
		vid("seconds", "1e300"), vid("guidance_scale", "0x1p2"), vid("num_frames", "99999999999999999999"),
		vid("size", "320×192"), mp(fieldsWith([]string{"model", "ref-t2v", "prompt", "a", "prompt", "b"})...),
		rawBody("multipart/form-data; boundary=zz", "--zz\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nhi"),
	} {
		f.Add(false, p.ct, p.body)
	}
	for _, p := range []payload{
		edit([]mpPart{{"image", "ref.png", ref}}, "size", "auto", "response_format", "b64_json", "n", "1"),
		edit([]mpPart{{"image", "ref.png", ref}}, "size", "256x256", "response_format", "url"),
		edit([]mpPart{{"image", "ref.png", pngHeader(100000, 100000, true)}}),
		edit([]mpPart{{"image[]", "a.png", ref}, {"mask", "m.png", ref}}, "n", "2"),
	} {
		f.Add(true, p.ct, p.body)
	}
	f.Add(true, "", []byte{})
	f.Add(false, "multipart/form-data; boundary", []byte("x"))

	f.Fuzz(func(t *testing.T, isEdit bool, contentType string, body []byte) {
		path := "/v1/videos"
		if isEdit {
			path = "/v1/images/edits"
		}
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		if rec.Code != 200 && (rec.Code < 400 || rec.Code > 499) {
			t.Fatalf("status %d for %q %q: %s", rec.Code, contentType, body, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil {
			t.Fatalf("status %d, body is not a JSON object: %v: %q", rec.Code, err, rec.Body)
		}
		if rec.Code == 200 {
			var ok struct{ ID string }
			if json.Unmarshal(rec.Body.Bytes(), &ok) != nil || ok.ID == "" {
				t.Fatalf("200 without an id: %s", rec.Body)
			}
			return
		}
		var env struct {
			Error *struct{ Message, Type, Code string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Error == nil ||
			env.Error.Message == "" || env.Error.Type == "" || env.Error.Code == "" {
			t.Fatalf("%d without a complete error envelope: %s", rec.Code, rec.Body)
		}
	})
}

// fuzzCheckpoints are the controls Resolve is fuzzed against: the reference families and a
// variant that takes negative_prompt and spells guidance true_cfg_scale.
func fuzzCheckpoints() []struct {
	cp  spec.Checkpoint
	cap spec.Capability
} {
	var out []struct {
		cp  spec.Checkpoint
		cap spec.Capability
	}
	for _, cp := range reference.Checkpoints() {
		for _, c := range []spec.Capability{spec.TextToVideo, spec.ImageEdit} {
			if cp.Has(c) {
				out = append(out, struct {
					cp  spec.Checkpoint
					cap spec.Capability
				}{cp, c})
			}
		}
	}
	neg := fakeCheckpoint("neg", spec.TextToVideo)
	neg.Controls.NegativePrompt, neg.Controls.GuidanceParam = true, "true_cfg_scale"
	out = append(out, struct {
		cp  spec.Checkpoint
		cap spec.Capability
	}{neg, spec.TextToVideo})
	return out
}

// resolveFields are the field names FuzzResolve sets, in mask-bit order.
var resolveFields = []string{"prompt", "size", "num_frames", "fps", "num_inference_steps", "guidance_scale",
	"true_cfg_scale", "seed", "seconds", "negative_prompt"}

// FuzzResolve calls Resolve with arbitrary field maps: it never panics, and it either refuses
// with a 400 apiError naming a field that was sent (or the missing prompt), or returns settings
// the checkpoint's controls allow in which every field that was sent is honoured exactly.
func FuzzResolve(f *testing.F) {
	cps := fuzzCheckpoints()
	all := uint16(1<<len(resolveFields) - 1)
	// Arguments: checkpoint, mask, prompt, size, num_frames, fps, steps, guidance, seed,
	// seconds, extraKey (also true_cfg_scale's value), extraVal (also negative_prompt's), ref W, H.
	// The AIPerf form: every value a string.
	f.Add(uint8(0), all&^(1<<6|1<<9), "a red ball rolls left", "320x192", "17", "16", "4", "5.0", "42", "1.0625", "", "", uint16(0), uint16(0))
	f.Add(uint8(1), uint16(1|1<<1|1<<4|1<<7), "invert the colours", "auto", "", "", "4", "", "7", "", "", "", uint16(96), uint16(64))
	f.Add(uint8(0), uint16(1|1<<3|1<<8), "p", "", "", "16", "", "", "", "0.5625", "", "", uint16(0), uint16(0))
	f.Add(uint8(0), uint16(1|1<<8), "p", "", "", "", "", "", "", "1e300", "", "", uint16(0), uint16(0))
	f.Add(uint8(0), uint16(1|1<<5), "p", "", "", "", "", "0x1p2", "", "", "", "", uint16(0), uint16(0))
	f.Add(uint8(0), uint16(1|1<<7), "p", "", "", "", "", "", "9223372036854775808", "", "", "", uint16(0), uint16(0))
	f.Add(uint8(0), uint16(1|1<<2|1<<8), "p", "", "17", "", "", "", "", "1.0625", "", "", uint16(0), uint16(0))
	f.Add(uint8(2), uint16(1|1<<6|1<<9), "p", "", "", "", "", "", "", "", "4", "blur", uint16(0), uint16(0))
	f.Add(uint8(0), uint16(1|1<<10), "  ", "", "", "", "", "", "", "", "colour", "red", uint16(0), uint16(0))
	f.Add(uint8(1), uint16(1|1<<1), "grayscale", "auto", "", "", "", "", "", "", "", "", uint16(4095), uint16(0))

	f.Fuzz(func(t *testing.T, which uint8, mask uint16, prompt, size, frames, fps, steps, guidance, seed, seconds, extraKey, extraVal string, refW, refH uint16) {
		pick := cps[int(which)%len(cps)]
		cp, capability := pick.cp, pick.cap
		// Values in resolveFields order; true_cfg_scale and negative_prompt reuse the extra ones.
		values := []string{prompt, size, frames, fps, steps, guidance, extraKey, seed, seconds, extraVal}
		fields := map[string]string{}
		for i, name := range resolveFields {
			if mask&(1<<i) != 0 {
				fields[name] = values[i]
			}
		}
		if mask&(1<<10) != 0 && extraKey != "" {
			fields[extraKey] = extraVal
		}
		var refSize *spec.Size
		if capability == spec.ImageEdit {
			refSize = &spec.Size{W: int(refW%4096) + 1, H: int(refH%4096) + 1}
		}

		s, aerr := server.Resolve(cp, capability, fields, refSize)
		if aerr != nil {
			if aerr.Status != 400 || aerr.Message == "" {
				t.Fatalf("refusal %+v", aerr)
			}
			switch aerr.Code {
			case "invalid_request", "unsupported_parameter", "unsupported_value":
			default:
				t.Fatalf("unexpected code %+v", aerr)
			}
			if !namesSentField(aerr.Param, fields) && aerr.Param != "prompt" {
				t.Fatalf("refusal names %q, which was not sent: %+v (fields %q)", aerr.Param, aerr, fields)
			}
			return
		}

		// Accepted numbers are written in decimal: no hex floats, Inf, NaN or digit separators,
		// which strconv would take but a client never means.
		for _, name := range []string{"num_frames", "fps", "num_inference_steps", "guidance_scale", "true_cfg_scale", "seed", "seconds"} {
			if v, ok := fields[name]; ok && strings.Trim(strings.TrimSpace(v), "+-.0123456789eE") != "" {
				t.Fatalf("%s %q accepted", name, v)
			}
		}
		c := cp.Controls
		allowed := []string{"prompt", "size", "num_inference_steps", "guidance_scale", "true_cfg_scale", "negative_prompt", "seed"}
		if capability == spec.TextToVideo {
			allowed = append(allowed, "num_frames", "fps", "seconds")
		}
		for k := range fields {
			if !slices.Contains(allowed, k) {
				t.Fatalf("accepted unknown field %q", k)
			}
		}
		if s.Prompt != fields["prompt"] || strings.TrimSpace(s.Prompt) == "" || len([]rune(s.Prompt)) > 32000 {
			t.Fatalf("prompt %q from %q", s.Prompt, fields["prompt"])
		}
		if v, ok := fields["negative_prompt"]; ok && (!c.NegativePrompt || s.NegativePrompt != v) {
			t.Fatalf("negative_prompt %q accepted as %q (supported: %v)", v, s.NegativePrompt, c.NegativePrompt)
		}
		switch v, ok := fields["size"]; {
		case !ok:
			if s.Size != cp.Defaults.Size {
				t.Fatalf("default size %v, got %v", cp.Defaults.Size, s.Size)
			}
		case v == "auto" && c.AutoSize && refSize != nil:
			if s.Size != *refSize {
				t.Fatalf("auto size %v, reference %v", s.Size, *refSize)
			}
		default:
			if sz, err := spec.ParseSize(v); err != nil || sz != s.Size || !c.AllowsSize(s.Size) {
				t.Fatalf("size %q resolved to %v (%v)", v, s.Size, err)
			}
		}
		exactInt := func(name string, got int64) {
			if v, ok := fields[name]; ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil || n != got {
					t.Fatalf("%s %q resolved to %d", name, v, got)
				}
			}
		}
		if !c.Steps.Contains(s.Steps) {
			t.Fatalf("steps %d outside %v", s.Steps, c.Steps)
		}
		exactInt("num_inference_steps", int64(s.Steps))
		if math.IsNaN(s.Guidance) || !c.Guidance.Contains(s.Guidance) {
			t.Fatalf("guidance %v outside %v", s.Guidance, c.Guidance)
		}
		for _, name := range []string{"guidance_scale", "true_cfg_scale"} {
			if v, ok := fields[name]; ok {
				g, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if name != c.GuidanceParam || err != nil || g != s.Guidance {
					t.Fatalf("%s %q resolved to %v (model takes %s)", name, v, s.Guidance, c.GuidanceParam)
				}
			}
		}
		if s.Seed < 0 {
			t.Fatalf("seed %d", s.Seed)
		}
		exactInt("seed", s.Seed)
		if capability != spec.TextToVideo {
			if s.NumFrames != 0 || s.FPS != 0 {
				t.Fatalf("an edit with frames %d fps %d", s.NumFrames, s.FPS)
			}
			return
		}
		if !c.AllowsFPS(s.FPS) || c.Frames == nil || !c.Frames.Allows(s.NumFrames) {
			t.Fatalf("fps %d / frames %d outside the controls", s.FPS, s.NumFrames)
		}
		exactInt("fps", int64(s.FPS))
		exactInt("num_frames", int64(s.NumFrames))
		if v, ok := fields["seconds"]; ok {
			sec, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || math.Abs(sec*float64(s.FPS)-float64(s.NumFrames)) > 1e-6 {
				t.Fatalf("seconds %q at %d fps resolved to %d frames", v, s.FPS, s.NumFrames)
			}
		}
		if _, ok := fields["num_frames"]; !ok {
			if _, ok := fields["seconds"]; !ok && s.NumFrames != cp.Defaults.NumFrames {
				t.Fatalf("default frames %d, got %d", cp.Defaults.NumFrames, s.NumFrames)
			}
		}
	})
}

// namesSentField: param is the name of a field that was sent, or, for a name past the bytes a
// refusal quotes (server.ExcerptBytes), its start followed by "…(N bytes)" with N its length.
func namesSentField(param string, fields map[string]string) bool {
	if _, ok := fields[param]; ok {
		return true
	}
	start, rest, cut := strings.Cut(param, "…(")
	for name := range fields {
		if cut && len(name) > server.ExcerptBytes && strings.HasPrefix(name, start) && rest == fmt.Sprintf("%d bytes)", len(name)) {
			return true
		}
	}
	return false
}
