// Package resize scales images deterministically. It sits below both fixtures (which pins
// resized references) and harness/media, so that neither imports the other.
package resize

import (
	"image"

	"golang.org/x/image/draw"
)

// Image scales img to w x h with Catmull-Rom; it returns img itself when the size already
// matches. Deterministic, so the same input always gives the same pixels.
func Image(img image.Image, w, h int) image.Image {
	if b := img.Bounds(); b.Dx() == w && b.Dy() == h {
		return img
	}
	dst := image.NewNRGBA(image.Rect(0, 0, w, h))
	draw.CatmullRom.Scale(dst, dst.Bounds(), img, img.Bounds(), draw.Src, nil)
	return dst
}
