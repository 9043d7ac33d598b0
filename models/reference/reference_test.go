package reference

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
)

func checkpoint(t testing.TB, id string) spec.Checkpoint {
	t.Helper()
	c, ok := find(id)
	require.True(t, ok, "no checkpoint %q", id)
	return c
}

func find(id string) (spec.Checkpoint, bool) {
	for _, c := range Checkpoints() {
		if c.ID == id {
			return c, true
		}
	}
	return spec.Checkpoint{}, false
}

func defaults(id string) spec.Settings {
	c, ok := find(id)
	if !ok {
		panic("no checkpoint " + id)
	}
	return c.Defaults
}

func run(t testing.TB, id string, req spec.Request) spec.Output {
	t.Helper()
	out, err := runErr(t, context.Background(), id, req)
	require.NoError(t, err)
	return out
}

func runErr(t testing.TB, ctx context.Context, id string, req spec.Request) (spec.Output, error) {
	t.Helper()
	task, err := checkpoint(t, id).NewTask()
	require.NoError(t, err)
	return task.Run(ctx, req)
}

// testRef is a non-square, asymmetric, colourful image, so every geometric and colour
// operation leaves a measurable trace.
func testRef(w, h int, variant int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{uint8(x * 255 / w), uint8(y * 255 / h), uint8((x*7 + y*3 + variant*90) % 256), 255}
			if x < w/3 && y < h/2 {
				c = color.RGBA{220, 40, uint8(30 + variant*50), 255}
			}
			if (x/4+y/4)%2 == 0 && x > w/2 && y > h/2 {
				c = color.RGBA{20, 200, 240, 255}
			}
			m.SetRGBA(x, y, c)
		}
	}
	return m
}

func t2vReq(mut func(*spec.Settings)) spec.Request {
	s := defaults("ref-t2v")
	s.Prompt = "a red fox running through snow"
	if mut != nil {
		mut(&s)
	}
	return spec.Request{Settings: s}
}

func editReq(id, prompt string, ref image.Image, mut func(*spec.Settings)) spec.Request {
	s := defaults(id)
	s.Prompt = prompt
	if ref != nil {
		s.Size = spec.Size{W: ref.Bounds().Dx(), H: ref.Bounds().Dy()} // what "auto" resolves to
	}
	if mut != nil {
		mut(&s)
	}
	return spec.Request{Settings: s, Reference: ref}
}

// rgba is out's frames as images: ref-t2v hands its clip over as packed rgb24, the image
// Tasks as images.
func rgba(out spec.Output) []*image.RGBA {
	if out.Video == nil {
		return out.Frames
	}
	fr := make([]*image.RGBA, out.Video.N)
	for i := range fr {
		fr[i] = out.Video.RGBA(i)
	}
	return fr
}

func frameBytes(out spec.Output) [][]byte {
	var b [][]byte
	for _, f := range rgba(out) {
		b = append(b, f.Pix)
	}
	return b
}

func meanAbsDiff(a, b []byte) float64 {
	var sum float64
	n := 0
	for i := range a {
		if i%4 == 3 {
			continue
		}
		sum += math.Abs(float64(a[i]) - float64(b[i]))
		n++
	}
	return sum / float64(n)
}

func maxAbsDiff(a, b []byte) int {
	m := 0
	for i := range a {
		d := int(a[i]) - int(b[i])
		m = max(m, d, -d)
	}
	return m
}

func TestCheckpointsDeclarations(t *testing.T) {
	cks := Checkpoints()
	require.Len(t, cks, 3)
	want := map[string]spec.Capability{"ref-t2v": spec.TextToVideo, "ref-edit": spec.ImageEdit, "ref-t2i": spec.ImageEdit}
	for _, c := range cks {
		t.Run(c.ID, func(t *testing.T) {
			cap, ok := want[c.ID]
			require.True(t, ok, "unexpected checkpoint")
			assert.Equal(t, []spec.Capability{cap}, c.Capabilities)
			assert.Equal(t, "reference", c.Family)
			assert.Equal(t, "reference/L0", c.Profile)
			assert.NotEmpty(t, c.Revision)
			assert.Equal(t, "fp32", c.Precision)
			assert.NotNil(t, c.NewTask)
			assert.Nil(t, c.Worker)
			assert.Equal(t, "guidance_scale", c.Controls.GuidanceParam)
			assert.False(t, c.Controls.NegativePrompt)

			d, ctl := c.Defaults, c.Controls
			assert.True(t, ctl.AllowsSize(d.Size), "default size %s", d.Size)
			assert.True(t, ctl.Steps.Contains(d.Steps), "default steps")
			assert.True(t, ctl.Guidance.Contains(d.Guidance), "default guidance")
			assert.Empty(t, d.NegativePrompt)
			for _, s := range ctl.Sizes {
				assert.True(t, s.W%2 == 0 && s.H%2 == 0, "size %s has an odd side", s)
			}
			if cap == spec.TextToVideo {
				require.NotNil(t, ctl.Frames)
				assert.True(t, ctl.Frames.Allows(d.NumFrames), "default frames")
				assert.True(t, ctl.AllowsFPS(d.FPS), "default fps")
				assert.False(t, ctl.AutoSize)
			} else {
				assert.Nil(t, ctl.Frames)
				assert.Empty(t, ctl.FPS)
				assert.True(t, ctl.AutoSize)
				assert.Zero(t, d.NumFrames)
			}
		})
	}
	// Callers get their own copies.
	cks[0].Controls.Sizes[0] = spec.Size{W: 1, H: 1}
	assert.NotEqual(t, spec.Size{W: 1, H: 1}, Checkpoints()[0].Controls.Sizes[0])
}

func TestOutputContract(t *testing.T) {
	ref := testRef(200, 120, 0)
	cases := []struct {
		id  string
		req spec.Request
	}{
		{"ref-t2v", t2vReq(nil)},
		{"ref-t2v", t2vReq(func(s *spec.Settings) { s.Size, s.NumFrames, s.FPS, s.Steps = spec.Size{W: 160, H: 96}, 5, 24, 1 })},
		{"ref-edit", editReq("ref-edit", "sepia", ref, func(s *spec.Settings) { s.Size = spec.Size{W: 320, H: 192} })},
		{"ref-edit", editReq("ref-edit", "rotate 90", ref, nil)},
		{"ref-t2i", editReq("ref-t2i", "a lighthouse at dusk", ref, func(s *spec.Settings) { s.Size = spec.Size{W: 384, H: 256} })},
	}
	for _, tc := range cases {
		s := tc.req.Settings
		t.Run(tc.id+"/"+s.Size.String(), func(t *testing.T) {
			out := run(t, tc.id, tc.req)
			wantFrames := 1
			if tc.id == "ref-t2v" {
				wantFrames = s.NumFrames
			}
			if tc.id == "ref-t2v" {
				require.NotNil(t, out.Video, "ref-t2v hands over packed rgb24")
				require.NoError(t, out.Video.Check())
			}
			require.Len(t, rgba(out), wantFrames)
			for _, f := range rgba(out) {
				require.Equal(t, image.Rect(0, 0, s.Size.W, s.Size.H), f.Rect)
				require.Equal(t, 4*s.Size.W, f.Stride)
				require.Len(t, f.Pix, 4*s.Size.W*s.Size.H)
				for i := 3; i < len(f.Pix); i += 4 {
					require.Equal(t, uint8(255), f.Pix[i], "alpha at byte %d", i)
				}
			}
			want := spec.Actual{Width: s.Size.W, Height: s.Size.H, Steps: s.Steps, Guidance: s.Guidance, Seed: s.Seed, Precision: "fp32"}
			if tc.id == "ref-t2v" {
				want.NumFrames, want.FPS, want.DurationS = s.NumFrames, s.FPS, float64(s.NumFrames)/float64(s.FPS)
			}
			assert.Equal(t, want, out.Actual)
			assert.Positive(t, out.TaskWall)
		})
	}
}

func TestDeterministicAndConcurrent(t *testing.T) {
	ref := testRef(256, 256, 1)
	cases := []struct {
		id  string
		req spec.Request
	}{
		{"ref-t2v", t2vReq(func(s *spec.Settings) { s.Size, s.NumFrames = spec.Size{W: 160, H: 96}, 9 })},
		{"ref-edit", editReq("ref-edit", "blur, then tint it purple and mirror", ref, nil)},
		{"ref-t2i", editReq("ref-t2i", "a lighthouse", ref, nil)},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			want := frameBytes(run(t, tc.id, tc.req))
			task, err := checkpoint(t, tc.id).NewTask()
			require.NoError(t, err)
			// One Task value serving concurrent Runs must give the same bytes.
			var wg sync.WaitGroup
			got := make([][][]byte, 4)
			for i := range got {
				wg.Go(func() {
					out, err := task.Run(context.Background(), tc.req)
					if assert.NoError(t, err) {
						got[i] = frameBytes(out)
					}
				})
			}
			wg.Wait()
			for _, g := range got {
				assert.Equal(t, want, g)
			}
		})
	}
}

func TestT2VEverySettingChangesOutput(t *testing.T) {
	small := func(s *spec.Settings) { s.Size, s.NumFrames = spec.Size{W: 160, H: 96}, 9 }
	base := frameBytes(run(t, "ref-t2v", t2vReq(small)))
	cases := []struct {
		name string
		mut  func(*spec.Settings)
	}{
		{"prompt", func(s *spec.Settings) { s.Prompt = "a blue whale" }},
		{"prompt case", func(s *spec.Settings) { s.Prompt = "A red fox running through snow" }},
		{"seed", func(s *spec.Settings) { s.Seed = 43 }},
		{"size", func(s *spec.Settings) { s.Size = spec.Size{W: 256, H: 256} }},
		{"frames", func(s *spec.Settings) { s.NumFrames = 13 }},
		{"fps", func(s *spec.Settings) { s.FPS = 24 }},
		{"steps", func(s *spec.Settings) { s.Steps = 8 }},
		{"steps high", func(s *spec.Settings) { s.Steps = 30 }},
		{"guidance", func(s *spec.Settings) { s.Guidance = 7.5 }},
		{"guidance zero", func(s *spec.Settings) { s.Guidance = 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := frameBytes(run(t, "ref-t2v", t2vReq(func(s *spec.Settings) { small(s); tc.mut(s) })))
			assert.NotEqual(t, base, got)
			// Frame count, fps, steps and guidance must change content, not just length:
			// frame 1 is compared where both clips have it at the same size.
			if len(got[1]) == len(base[1]) {
				assert.Greater(t, meanAbsDiff(base[1], got[1]), 0.0, "frame 1 unchanged")
			}
		})
	}
}

func TestT2VGuidanceIsSaturation(t *testing.T) {
	sat := func(g float64) float64 {
		out := run(t, "ref-t2v", t2vReq(func(s *spec.Settings) { s.Size, s.NumFrames, s.Steps, s.Guidance = spec.Size{W: 160, H: 96}, 5, 10, g }))
		p := rgba(out)[2].Pix
		var sum float64
		for i := 0; i < len(p); i += 4 {
			sum += float64(max(p[i], p[i+1], p[i+2]) - min(p[i], p[i+1], p[i+2]))
		}
		return sum / float64(len(p)/4)
	}
	s0, s5, s20 := sat(0), sat(5), sat(20)
	assert.Less(t, s0, 3.0, "guidance 0 is grey up to residual noise")
	assert.Greater(t, s5, s0+20)
	assert.Greater(t, s20, s5+20)
}

func TestT2VMotion(t *testing.T) {
	for _, fps := range []int{8, 16, 24} {
		for _, sz := range []spec.Size{{W: 320, H: 192}, {W: 160, H: 96}} {
			t.Run(sz.String(), func(t *testing.T) {
				out := run(t, "ref-t2v", t2vReq(func(s *spec.Settings) { s.FPS, s.Size = fps, sz }))
				frames := rgba(out)
				for i, f := range frames {
					var mean, sq float64
					for j := 0; j < len(f.Pix); j++ {
						if j%4 != 3 {
							v := float64(f.Pix[j])
							mean += v
							sq += v * v
						}
					}
					n := float64(len(f.Pix) * 3 / 4)
					mean /= n
					assert.Greater(t, math.Sqrt(sq/n-mean*mean), 20.0, "frame %d nearly constant", i)
					if i > 0 {
						d := meanAbsDiff(frames[i-1].Pix, f.Pix)
						assert.Greater(t, d, 2.0, "fps %d frames %d→%d differ by %.2f", fps, i-1, i, d)
					}
				}
			})
		}
	}
}

func TestT2IIsFrameZeroAndIgnoresReference(t *testing.T) {
	a := run(t, "ref-t2i", editReq("ref-t2i", "a lighthouse", testRef(256, 256, 0), nil))
	b := run(t, "ref-t2i", editReq("ref-t2i", "a lighthouse", testRef(256, 256, 2), nil))
	c := run(t, "ref-t2i", editReq("ref-t2i", "a lighthouse", nil, nil))
	assert.Equal(t, frameBytes(a), frameBytes(b), "reference must not matter")
	assert.Equal(t, frameBytes(a), frameBytes(c), "reference must not matter")
	d := run(t, "ref-t2i", editReq("ref-t2i", "a harbour", testRef(256, 256, 0), nil))
	assert.NotEqual(t, frameBytes(a), frameBytes(d), "prompt must matter")

	// ref-t2i's guidance 1 is ref-t2v's 5: both neutral saturation.
	v := run(t, "ref-t2v", t2vReq(func(s *spec.Settings) { s.Prompt, s.Size, s.NumFrames = "a lighthouse", spec.Size{W: 256, H: 256}, 5 }))
	assert.True(t, bytes.Equal(rgba(v)[0].Pix, a.Frames[0].Pix), "ref-t2i renders ref-t2v's first frame")
}

// at returns the RGB of pixel (x, y).
func at(m *image.RGBA, x, y int) [3]int {
	i := m.PixOffset(x, y)
	return [3]int{int(m.Pix[i]), int(m.Pix[i+1]), int(m.Pix[i+2])}
}

func near(t *testing.T, got, want [3]float64, tol float64, msg string, args ...any) bool {
	t.Helper()
	for c := range 3 {
		if math.Abs(got[c]-want[c]) > tol {
			return assert.Fail(t, fmt.Sprintf("got %v want %v; "+msg, append([]any{got, want}, args...)...))
		}
	}
	return true
}

func toF(p [3]int) [3]float64 { return [3]float64{float64(p[0]), float64(p[1]), float64(p[2])} }

// pixelwise checks out against want(x, y) within tol, stopping at the first failure.
func pixelwise(t *testing.T, out *image.RGBA, tol float64, want func(x, y int) [3]float64) {
	t.Helper()
	b := out.Rect
	for y := range b.Dy() {
		for x := range b.Dx() {
			if !near(t, toF(at(out, x, y)), want(x, y), tol, "at (%d,%d)", x, y) {
				return
			}
		}
	}
}

func TestEditVocabulary(t *testing.T) {
	const w, h = 96, 64
	ref := testRef(w, h, 0)
	rp := func(x, y int) [3]float64 { return toF(at(ref, x, y)) }
	same := spec.Size{W: w, H: h}
	swapped := spec.Size{W: h, H: w}
	tint := func(col [3]float64) func(x, y int) [3]float64 {
		return func(x, y int) [3]float64 {
			p := rp(x, y)
			for c := range 3 {
				p[c] = 0.65*p[c] + 0.35*col[c]
			}
			return p
		}
	}
	cases := []struct {
		prompt string
		size   spec.Size
		want   func(x, y int) [3]float64 // nil: property checked by check
		check  func(t *testing.T, out *image.RGBA)
	}{
		{prompt: "Make it GRAYSCALE", size: same, want: func(x, y int) [3]float64 {
			p := rp(x, y)
			l := 0.299*p[0] + 0.587*p[1] + 0.114*p[2]
			return [3]float64{l, l, l}
		}},
		{prompt: "greyscale please", size: same, check: func(t *testing.T, out *image.RGBA) {
			for i := 0; i < len(out.Pix); i += 4 {
				p := out.Pix[i : i+3]
				require.LessOrEqual(t, int(max(p[0], p[1], p[2])-min(p[0], p[1], p[2])), 3, "R==G==B within dither")
			}
		}},
		{prompt: "invert the colours", size: same, want: func(x, y int) [3]float64 {
			p := rp(x, y)
			return [3]float64{255 - p[0], 255 - p[1], 255 - p[2]}
		}},
		{prompt: "sepia", size: same, want: func(x, y int) [3]float64 {
			p := rp(x, y)
			return [3]float64{
				min(255, 0.393*p[0]+0.769*p[1]+0.189*p[2]),
				min(255, 0.349*p[0]+0.686*p[1]+0.168*p[2]),
				min(255, 0.272*p[0]+0.534*p[1]+0.131*p[2]),
			}
		}},
		{prompt: "rotate", size: swapped, want: func(x, y int) [3]float64 { return rp(y, h-1-x) }},
		{prompt: "rotate 90", size: swapped, want: func(x, y int) [3]float64 { return rp(y, h-1-x) }},
		{prompt: "rotate the image by 180 degrees", size: same, want: func(x, y int) [3]float64 { return rp(w-1-x, h-1-y) }},
		{prompt: "rotate 270", size: swapped, want: func(x, y int) [3]float64 { return rp(w-1-y, x) }},
		{prompt: "rotate 90 degrees counter-clockwise", size: swapped, want: func(x, y int) [3]float64 { return rp(w-1-y, x) }},
		{prompt: "mirror", size: same, want: func(x, y int) [3]float64 { return rp(w-1-x, y) }},
		{prompt: "flip horizontally", size: same, want: func(x, y int) [3]float64 { return rp(w-1-x, y) }},
		{prompt: "flip", size: same, want: func(x, y int) [3]float64 { return rp(x, h-1-y) }},
		{prompt: "flipped", size: same, want: func(x, y int) [3]float64 { return rp(x, h-1-y) }},
		{prompt: "blur", size: same, check: func(t *testing.T, out *image.RGBA) {
			assert.Less(t, roughness(out), 0.5*roughness(ref), "blur halves local contrast at least")
		}},
		{prompt: "posterize", size: same, check: func(t *testing.T, out *image.RGBA) {
			for i, v := range out.Pix {
				if i%4 != 3 {
					q := (int(v) + 42) / 85 * 85
					require.LessOrEqual(t, max(int(v)-q, q-int(v)), 2, "value %d is not one of 4 levels", v)
				}
			}
		}},
		{prompt: "posterise", size: same, check: func(t *testing.T, out *image.RGBA) {}},
		{prompt: "tint red", size: same, want: tint([3]float64{255, 0, 0})},
		{prompt: "tint it green", size: same, want: tint([3]float64{0, 255, 0})},
		{prompt: "tinted blue", size: same, want: tint([3]float64{0, 0, 255})},
		{prompt: "tint yellow", size: same, want: tint([3]float64{255, 255, 0})},
		{prompt: "tint cyan", size: same, want: tint([3]float64{0, 255, 255})},
		{prompt: "tint magenta", size: same, want: tint([3]float64{255, 0, 255})},
		{prompt: "tint orange", size: same, want: tint([3]float64{255, 165, 0})},
		{prompt: "tint purple", size: same, want: tint([3]float64{128, 0, 128})},
	}
	for _, tc := range cases {
		t.Run(tc.prompt, func(t *testing.T) {
			out := run(t, "ref-edit", editReq("ref-edit", tc.prompt, ref, func(s *spec.Settings) { s.Size = tc.size })).Frames[0]
			require.Equal(t, image.Rect(0, 0, tc.size.W, tc.size.H), out.Rect)
			if tc.size == same {
				assert.Greater(t, meanAbsDiff(ref.Pix, out.Pix), 5.0, "the edit must change the image")
			}
			if tc.want != nil {
				pixelwise(t, out, 2, tc.want)
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
}

// roughness is the mean absolute difference between horizontal neighbours.
func roughness(m *image.RGBA) float64 {
	var sum float64
	n := 0
	for y := range m.Rect.Dy() {
		for x := 1; x < m.Rect.Dx(); x++ {
			a, b := at(m, x-1, y), at(m, x, y)
			for c := range 3 {
				sum += math.Abs(float64(a[c] - b[c]))
				n++
			}
		}
	}
	return sum / float64(n)
}

func TestEditComposition(t *testing.T) {
	ref := testRef(96, 64, 0)
	edit := func(prompt string, ref image.Image, mut func(*spec.Settings)) *image.RGBA {
		return run(t, "ref-edit", editReq("ref-edit", prompt, ref, mut)).Frames[0]
	}

	t.Run("invert twice in one prompt is identity", func(t *testing.T) {
		assert.LessOrEqual(t, maxAbsDiff(ref.Pix, edit("invert, then invert again", ref, nil).Pix), 2)
	})
	t.Run("invert of invert", func(t *testing.T) {
		once := edit("invert", ref, nil)
		assert.LessOrEqual(t, maxAbsDiff(ref.Pix, edit("invert", once, nil).Pix), 4)
	})
	t.Run("order matters", func(t *testing.T) {
		grayLast := edit("tint red then grayscale", ref, nil)
		tintLast := edit("grayscale then tint red", ref, nil)
		p, q := at(grayLast, 10, 50), at(tintLast, 10, 50)
		assert.InDelta(t, p[0], p[1], 3, "grayscale last leaves grey")
		assert.Greater(t, q[0], q[1]+40, "tint last leaves red")
	})
	t.Run("rotate 90 four times is identity", func(t *testing.T) {
		assert.LessOrEqual(t, maxAbsDiff(ref.Pix, edit("rotate, rotate, rotate and rotate", ref, nil).Pix), 2)
	})
	t.Run("geometry before resize keeps req size", func(t *testing.T) {
		out := edit("rotate 90 and sepia", ref, func(s *spec.Settings) { s.Size = spec.Size{W: 256, H: 256} })
		assert.Equal(t, image.Rect(0, 0, 256, 256), out.Rect)
	})
	t.Run("sub-image reference with offset origin", func(t *testing.T) {
		big := testRef(200, 200, 0)
		sub := big.SubImage(image.Rect(50, 40, 146, 104))
		flat := image.NewRGBA(image.Rect(0, 0, 96, 64))
		for y := range 64 {
			for x := range 96 {
				flat.Set(x, y, big.At(x+50, y+40))
			}
		}
		assert.Equal(t, edit("mirror", flat, nil).Pix, edit("mirror", sub, nil).Pix)
	})
	t.Run("transparent reference is flattened opaque", func(t *testing.T) {
		clear := image.NewNRGBA(image.Rect(0, 0, 32, 32))
		out := edit("invert", clear, nil)
		for i := 0; i < len(out.Pix); i += 4 {
			require.Equal(t, uint8(255), out.Pix[i+3])
			require.GreaterOrEqual(t, out.Pix[i], uint8(253))
		}
	})
	t.Run("different references differ", func(t *testing.T) {
		a := edit("sepia", testRef(256, 256, 0), nil)
		b := edit("sepia", testRef(256, 256, 2), nil)
		assert.Greater(t, meanAbsDiff(a.Pix, b.Pix), 1.0)
	})
	t.Run("guidance scales the colour edit", func(t *testing.T) {
		g0 := edit("invert", ref, func(s *spec.Settings) { s.Guidance = 0 })
		assert.LessOrEqual(t, maxAbsDiff(ref.Pix, g0.Pix), 2, "guidance 0 leaves the reference")
		half := edit("invert", ref, func(s *spec.Settings) { s.Guidance = 0.5 })
		for i := 0; i < len(half.Pix); i += 4 {
			require.InDelta(t, 127.5, float64(half.Pix[i]), 2.5, "invert at 0.5 is mid grey")
		}
		g1 := edit("posterize", ref, nil)
		g3 := edit("posterize", ref, func(s *spec.Settings) { s.Guidance = 3 })
		assert.Greater(t, meanAbsDiff(ref.Pix, g3.Pix), meanAbsDiff(ref.Pix, g1.Pix)*1.5, "extrapolation, clamped")
	})
	t.Run("seed changes bytes not look", func(t *testing.T) {
		a := edit("sepia", ref, nil)
		b := edit("sepia", ref, func(s *spec.Settings) { s.Seed = 7 })
		assert.NotEqual(t, a.Pix, b.Pix)
		assert.LessOrEqual(t, maxAbsDiff(a.Pix, b.Pix), 4)
	})
	t.Run("steps change bytes not look", func(t *testing.T) {
		outs := map[int]*image.RGBA{}
		for _, n := range []int{1, 2, 4, 13, 50} {
			outs[n] = edit("sepia and blur", ref, func(s *spec.Settings) { s.Steps = n })
		}
		for _, n := range []int{1, 2, 13, 50} {
			assert.NotEqual(t, outs[4].Pix, outs[n].Pix, "steps %d", n)
			assert.LessOrEqual(t, maxAbsDiff(outs[4].Pix, outs[n].Pix), 4, "steps %d", n)
		}
	})
}

func TestEditUnsupported(t *testing.T) {
	ref := testRef(64, 64, 0)
	for _, prompt := range []string{"", "make it look like a painting", "rotate 45 degrees", "tint", "tint it mauve", "tint blur red"} {
		t.Run(prompt, func(t *testing.T) {
			_, err := runErr(t, context.Background(), "ref-edit", editReq("ref-edit", prompt, ref, nil))
			var se *spec.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "unsupported_instruction", se.Code)
			assert.Contains(t, se.Message, "posterize")
		})
	}
}

func TestInvalidRequests(t *testing.T) {
	ref := testRef(64, 64, 0)
	cases := []struct {
		name string
		id   string
		req  spec.Request
	}{
		{"edit nil reference", "ref-edit", editReq("ref-edit", "invert", nil, nil)},
		{"edit empty reference", "ref-edit", editReq("ref-edit", "invert", image.NewRGBA(image.Rectangle{}), func(s *spec.Settings) { s.Size = spec.Size{W: 8, H: 8} })},
		{"edit zero size", "ref-edit", editReq("ref-edit", "invert", ref, func(s *spec.Settings) { s.Size = spec.Size{} })},
		{"t2i zero size", "ref-t2i", editReq("ref-t2i", "x", ref, func(s *spec.Settings) { s.Size = spec.Size{W: 0, H: 10} })},
		{"t2v zero size", "ref-t2v", t2vReq(func(s *spec.Settings) { s.Size = spec.Size{} })},
		{"t2v zero fps", "ref-t2v", t2vReq(func(s *spec.Settings) { s.FPS = 0 })},
		{"t2v zero frames", "ref-t2v", t2vReq(func(s *spec.Settings) { s.NumFrames = 0 })},
		{"t2v zero steps", "ref-t2v", t2vReq(func(s *spec.Settings) { s.Steps = 0 })},
		{"t2v NaN guidance", "ref-t2v", t2vReq(func(s *spec.Settings) { s.Guidance = math.NaN() })},
		{"t2v huge clip", "ref-t2v", t2vReq(func(s *spec.Settings) { s.Size, s.NumFrames = spec.Size{W: 8192, H: 8192}, 81 })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runErr(t, context.Background(), tc.id, tc.req)
			var se *spec.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, "invalid_request", se.Code)
		})
	}
}

func TestProgressAndCancellation(t *testing.T) {
	ref := testRef(64, 64, 0)
	reqs := map[string]func() spec.Request{
		"ref-t2v":  func() spec.Request { return t2vReq(func(s *spec.Settings) { s.Steps = 6 }) },
		"ref-edit": func() spec.Request { return editReq("ref-edit", "sepia", ref, func(s *spec.Settings) { s.Steps = 6 }) },
		"ref-t2i":  func() spec.Request { return editReq("ref-t2i", "sepia", ref, func(s *spec.Settings) { s.Steps = 6 }) },
	}
	for id, mk := range reqs {
		t.Run(id+"/progress", func(t *testing.T) {
			req := mk()
			var got [][2]int
			req.Progress = func(done, total int) { got = append(got, [2]int{done, total}) }
			run(t, id, req)
			assert.Equal(t, [][2]int{{1, 6}, {2, 6}, {3, 6}, {4, 6}, {5, 6}, {6, 6}}, got)
		})
		t.Run(id+"/cancelled before", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := runErr(t, ctx, id, mk())
			assert.ErrorIs(t, err, context.Canceled)
		})
		t.Run(id+"/cancelled mid-run", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := mk()
			calls := 0
			req.Progress = func(done, total int) {
				calls++
				if done == 2 {
					cancel()
				}
			}
			out, err := runErr(t, ctx, id, req)
			assert.ErrorIs(t, err, context.Canceled)
			assert.Nil(t, out.Frames)
			assert.Nil(t, out.Video)
			assert.Equal(t, 2, calls, "no step runs after cancellation")
		})
	}
}

func TestParseInstruction(t *testing.T) {
	kinds := func(ops []editOp) []opKind {
		var k []opKind
		for _, o := range ops {
			k = append(k, o.kind)
		}
		return k
	}
	ops, err := parseInstruction("Blur it, then INVERT; mirrored & posterised, tint: orange, Sepia, Greyscale")
	require.NoError(t, err)
	assert.Equal(t, []opKind{opBlur, opInvert, opMirror, opPosterize, opTint, opSepia, opGray}, kinds(ops))
	assert.Equal(t, [3]float64{255, 165, 0}, ops[4].colour)

	for prompt, q := range map[string]int{
		"rotate": 1, "rotated 180": 2, "rotation by 270 degrees": 3, "rotate 90 ccw": 3,
		"rotate anticlockwise": 3, "rotate 270 counter clockwise": 1, "rotate then blur 180": 1,
	} {
		ops, err := parseInstruction(prompt)
		require.NoError(t, err, prompt)
		assert.Equal(t, q, ops[0].quarter, prompt)
	}
}

func BenchmarkRefT2VDefault(b *testing.B) {
	task, _ := checkpoint(b, "ref-t2v").NewTask()
	req := t2vReq(nil)
	for b.Loop() {
		if _, err := task.Run(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRefEditDefault(b *testing.B) {
	task, _ := checkpoint(b, "ref-edit").NewTask()
	req := editReq("ref-edit", "grayscale, blur and tint blue", testRef(256, 256, 0), nil)
	for b.Loop() {
		if _, err := task.Run(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestT2VStreamsItsFrames: ref-t2v hands each frame to Request.Frames as soon as its last
// step is done (before the last progress call), as a slice of the clip it returns, and the
// clip is the one it renders without a sink.
func TestT2VStreamsItsFrames(t *testing.T) {
	req := t2vReq(func(s *spec.Settings) { s.Size, s.NumFrames, s.Steps = spec.Size{W: 160, H: 96}, 9, 3 })
	plain := run(t, "ref-t2v", req)

	var events []string
	var chunks [][]byte
	req.Progress = func(done, total int) { events = append(events, fmt.Sprintf("step %d", done)) }
	req.Frames = func(pix []byte) {
		events = append(events, "frame")
		chunks = append(chunks, pix)
	}
	out := run(t, "ref-t2v", req)
	require.NotNil(t, out.Video)
	assert.Equal(t, plain.Video.Pix, out.Video.Pix, "streaming changes no byte")
	want := []string{"step 1", "step 2"}
	for range 9 {
		want = append(want, "frame")
	}
	assert.Equal(t, append(want, "step 3"), events)
	fb := out.Video.FrameBytes()
	for i, c := range chunks {
		require.Len(t, c, fb)
		require.Same(t, &out.Video.Pix[i*fb], &c[0], "frame %d is the clip's own bytes", i)
	}
}
