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
	for _, name := range []string{"gopher-doc.1bpp.lossless.webp", "blue-purple-pink.lossy.webp", "progressive-cmyk-1024.jpg"} {
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

// decodeCost covers what the decoders really allocate (counted by the runtime) for each format
// and variant, and not wildly more: the memory budget is charged with it before anything is
// decoded. The 164-byte progressive CMYK JPEG claims 4096x4096; Go's decoder allocates some
// 320 MiB for it before it finds the data short.
func TestDecodeCostCoversTheDecoder(t *testing.T) {
	enc := func(m image.Image, jpg bool) []byte {
		var b bytes.Buffer
		var err error
		if jpg {
			err = jpeg.Encode(&b, m, nil)
		} else {
			err = png.Encode(&b, m)
		}
		if err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	r := image.Rect(0, 0, 512, 384)
	for name, b := range map[string][]byte{
		"progressive CMYK JPEG":         read("progressive-cmyk-1024.jpg"),
		"progressive CMYK JPEG bomb":    read("bomb-4096-progressive-cmyk.jpg"),
		"baseline JPEG":                 enc(image.NewRGBA(r), true),
		"gray JPEG":                     enc(image.NewGray(r), true),
		"8-bit RGBA PNG":                enc(image.NewNRGBA(r), false),
		"16-bit RGBA PNG":               enc(image.NewRGBA64(r), false),
		"16-bit gray PNG":               enc(image.NewGray16(r), false),
		"paletted PNG":                  enc(image.NewPaletted(r, color.Palette{color.Black, color.White}), false),
		"lossless WebP (1 bit a pixel)": read("gopher-doc.1bpp.lossless.webp"),
		"lossy WebP":                    read("blue-purple-pink.lossy.webp"),
	} {
		cfg, cost, err := checkImage(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _ = decodeReference(b)
		runtime.ReadMemStats(&after)
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s %dx%d: allocated %d, cost %d", name, cfg.Width, cfg.Height, alloc, cost)
		if alloc > cost {
			t.Errorf("%s: decoding allocated %d bytes; decodeCost said %d", name, alloc, cost)
		}
		// Less the Task's RGBA working copy, which the decode itself does not make.
		if decode := cost - 4*int64(cfg.Width*cfg.Height); decode > 4*alloc+decoderOverhead {
			t.Errorf("%s: decodeCost's decode part %d is over 4 times the %d allocated", name, decode, alloc)
		}
	}
}
