package spec

import (
	"image"
	"image/color"
)

// RGB is an opaque image of packed rgb24 pixels: the layout of an 8-bit truecolour PNG and of
// Video's frames. The server's PNG decoder gives an edit's reference so, and an out-of-process
// Task hands its Pix to the worker as they are.
type RGB struct {
	Pix    []byte // row y starts at (y-Rect.Min.Y)*Stride
	Stride int
	Rect   image.Rectangle
}

// NewRGB returns a black RGB image of r's size.
func NewRGB(r image.Rectangle) *RGB {
	return &RGB{Pix: make([]byte, 3*r.Dx()*r.Dy()), Stride: 3 * r.Dx(), Rect: r}
}

func (m *RGB) ColorModel() color.Model { return color.RGBAModel }

func (m *RGB) Bounds() image.Rectangle { return m.Rect }

func (m *RGB) At(x, y int) color.Color { return m.RGBAAt(x, y) }

// RGBAAt is the pixel at (x, y), opaque; outside Rect, transparent black.
func (m *RGB) RGBAAt(x, y int) color.RGBA {
	if !image.Pt(x, y).In(m.Rect) {
		return color.RGBA{}
	}
	i := (y-m.Rect.Min.Y)*m.Stride + 3*(x-m.Rect.Min.X)
	return color.RGBA{m.Pix[i], m.Pix[i+1], m.Pix[i+2], 0xff}
}

// Opaque is true: RGB has no alpha.
func (m *RGB) Opaque() bool { return true }
