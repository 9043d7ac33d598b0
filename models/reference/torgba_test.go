package reference

import (
	"image"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/models/spec"
)

// TestToRGBAOfRGB: an RGB reference (as the server decodes an RGB PNG) gives the family the
// same image as the *image.RGBA of its pixels.
func TestToRGBAOfRGB(t *testing.T) {
	m := spec.NewRGB(image.Rect(0, 0, 7, 5))
	for i := range m.Pix {
		m.Pix[i] = byte(i*53 + 5)
	}
	rgba := image.NewRGBA(m.Rect)
	spec.ExpandRGB(rgba.Pix, m.Pix)
	require.Equal(t, toRGBA(rgba), toRGBA(m))
}

// BenchmarkToRGBA: a 1024² reference as the server decodes an RGB PNG, and as an RGBA image.
func BenchmarkToRGBA(b *testing.B) {
	m := spec.NewRGB(image.Rect(0, 0, 1024, 1024))
	r := image.NewRGBA(m.Rect)
	b.Run("rgb", func(b *testing.B) {
		for b.Loop() {
			toRGBA(m)
		}
	})
	b.Run("rgba", func(b *testing.B) {
		for b.Loop() {
			toRGBA(r)
		}
	})
}
