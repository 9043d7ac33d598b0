package server

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"runtime"
	"testing"

	"github.com/mediaqual/mediaqual/models/spec"
)

// FuzzReference runs an upload through what the edit route and its lane do with it (the header
// check on the request, then the standard library's decode: image/png, image/jpeg and
// golang.org/x/image/webp) on arbitrary bytes. Nothing panics; what the check accepts is at
// most maxPixels, so the decode allocates no more than such an image; every refusal and every
// failed decode is the request's fault naming image; a decoded image is the size its header
// said. The seeds are one file of each kind the decoders take (the two WebP files are
// golang.org/x/image's own testdata).
func FuzzReference(f *testing.F) {
	const maxPixels = 160 * 100
	img := func(m image.Image, enc func(*bytes.Buffer, image.Image) error) []byte {
		var b bytes.Buffer
		if err := enc(&b, m); err != nil {
			f.Fatal(err)
		}
		return b.Bytes()
	}
	pngEnc := func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) }
	nrgba := image.NewNRGBA(image.Rect(0, 0, 7, 5))
	for i := range nrgba.Pix {
		nrgba.Pix[i] = byte(i * 37)
	}
	rgb := image.NewRGBA(image.Rect(0, 0, 6, 4))
	for i := range rgb.Pix {
		rgb.Pix[i] = byte(i*13) | 3
	}
	pal := image.NewPaletted(image.Rect(0, 0, 5, 3), color.Palette{color.Black, color.NRGBA{200, 100, 50, 128}})
	pal.Pix[4] = 1
	for _, s := range [][]byte{
		img(nrgba, pngEnc), img(rgb, pngEnc), img(image.NewGray(image.Rect(0, 0, 9, 2)), pngEnc), img(pal, pngEnc),
		img(image.NewRGBA64(image.Rect(0, 0, 3, 3)), pngEnc), img(image.NewGray16(image.Rect(0, 0, 4, 1)), pngEnc),
		img(rgb, func(b *bytes.Buffer, m image.Image) error { return jpeg.Encode(b, m, nil) }),
		img(image.NewGray(image.Rect(0, 0, 17, 9)), func(b *bytes.Buffer, m image.Image) error { return jpeg.Encode(b, m, nil) }),
	} {
		f.Add(s)
	}
	for _, name := range []string{"gopher-doc.1bpp.lossless.webp", "blue-purple-pink.lossy.webp"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}

	f.Fuzz(func(t *testing.T, b []byte) {
		size, cost, e := checkReference(b, maxPixels)
		if e != nil {
			if e.Status != 400 || e.Param != "image" || e.Message == "" {
				t.Fatalf("refused as %+v", e)
			}
			return
		}
		if size.W <= 0 || size.H <= 0 || size.W*size.H > maxPixels {
			t.Fatalf("accepted %v", size)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := decodeReference(b)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(cost) {
			t.Fatalf("decoding allocated %d bytes; decodeCost said %d", alloc, cost)
		}
		if err != nil {
			var se *spec.Error
			if !errors.As(err, &se) || !se.BadInput || se.Param != "image" || se.Code != "invalid_request" {
				t.Fatalf("decode failed as %#v", err)
			}
			return
		}
		if got := m.Bounds().Size(); got != image.Pt(size.W, size.H) {
			t.Fatalf("decoded %v, the header said %v", got, size)
		}
	})
}
