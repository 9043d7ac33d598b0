package spec

import (
	"image"
	"image/color"
	"image/draw"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRGB holds RGB's pixel methods to the *image.RGBA of the same pixels, on an image whose
// Rect does not start at the origin, and image/draw (which takes RGBA64At) to the same.
func TestRGB(t *testing.T) {
	r := image.Rect(-3, 2, 4, 7)
	m := NewRGB(r)
	for i := range m.Pix {
		m.Pix[i] = byte(i*37 + 11)
	}
	want := image.NewRGBA(r)
	ExpandRGB(want.Pix, m.Pix)
	require.True(t, m.Opaque())
	require.Equal(t, r, m.Bounds())
	for y := r.Min.Y - 1; y <= r.Max.Y; y++ {
		for x := r.Min.X - 1; x <= r.Max.X; x++ {
			require.Equal(t, want.RGBAAt(x, y), m.RGBAAt(x, y), "(%d, %d)", x, y)
			require.Equal(t, want.RGBA64At(x, y), m.RGBA64At(x, y), "(%d, %d)", x, y)
			require.Equal(t, color.Color(want.RGBAAt(x, y)), m.At(x, y), "(%d, %d)", x, y)
		}
	}
	got := image.NewRGBA(r)
	draw.Draw(got, r, m, r.Min, draw.Src)
	require.Equal(t, want.Pix, got.Pix)
}
