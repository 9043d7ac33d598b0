package media

import (
	"image"

	"golang.org/x/image/draw"
)

// Resize scales img to w x h with Catmull-Rom; it returns img itself when the size already
// matches. Deterministic, so the same input always gives the same pixels.
func Resize(img image.Image, w, h int) image.Image {
	if b := img.Bounds(); b.Dx() == w && b.Dy() == h {
		return img
	}
	dst := image.NewNRGBA(image.Rect(0, 0, w, h))
	draw.CatmullRom.Scale(dst, dst.Bounds(), img, img.Bounds(), draw.Src, nil)
	return dst
}
