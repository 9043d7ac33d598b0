package pngread

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
	"time"

	"mediaqual/fixtures"
	"mediaqual/models/spec"
)

// --- hand-built PNGs -------------------------------------------------------------------

func chunk(typ string, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	b = append(append(b, typ...), body...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[4:]))
}

func ihdr(w, h int, depth, ct, interlace byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(w))
	b = binary.BigEndian.AppendUint32(b, uint32(h))
	return chunk("IHDR", append(b, depth, ct, 0, 0, interlace))
}

func file(chunks ...[]byte) []byte {
	return append([]byte("\x89PNG\r\n\x1a\n"), bytes.Join(chunks, nil)...)
}

func deflate(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&buf, zlib.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// filterRows applies the PNG filter filt(y) to each row of raw samples (bpp bytes per pixel)
// straight from the spec's formulas, and returns the stream the IDAT chunks compress.
func filterRows(rows [][]byte, bpp int, filt func(y int) byte) []byte {
	var out []byte
	prev := make([]byte, len(rows[0]))
	for y, row := range rows {
		f := filt(y)
		out = append(out, f)
		for i, x := range row {
			var a, b, c int
			if i >= bpp {
				a, c = int(row[i-bpp]), int(prev[i-bpp])
			}
			b = int(prev[i])
			var p int
			switch f {
			case 1:
				p = a
			case 2:
				p = b
			case 3:
				p = (a + b) / 2
			case 4:
				pp := a + b - c
				pa, pb, pc := max(pp-a, a-pp), max(pp-b, b-pp), max(pp-c, c-pp)
				switch {
				case pa <= pb && pa <= pc:
					p = a
				case pb <= pc:
					p = b
				default:
					p = c
				}
			}
			out = append(out, x-byte(p))
		}
		prev = row
	}
	return out
}

// samples returns h rows of w pixels of noisy gradients (alpha varies when bpp is 4), so
// predictors see every ordering of a, b and c.
func samples(w, h, bpp int, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, 1))
	rows := make([][]byte, h)
	for y := range rows {
		rows[y] = make([]byte, w*bpp)
		for x := range w {
			for c := range bpp {
				rows[y][x*bpp+c] = byte(x*(c+1)+y*3) + byte(r.IntN(9)) - 4
			}
		}
	}
	return rows
}

// rgbFile builds an 8-bit colour-type ct (2 or 6) PNG with filter filt(y) on row y.
func rgbFile(w, h int, ct byte, filt func(y int) byte) []byte {
	bpp := map[byte]int{2: 3, 6: 4}[ct]
	idat := chunk("IDAT", deflate(filterRows(samples(w, h, bpp, uint64(w*h)), bpp, filt)))
	return file(ihdr(w, h, 8, ct, 0), idat, chunk("IEND", nil))
}

func encode(t testing.TB, m image.Image, level png.CompressionLevel) []byte {
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: level}).Encode(&buf, m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// --- checks --------------------------------------------------------------------------

// same checks that Decode returns what image/png returns: the same concrete type, Rect,
// Stride and Pix (for a *spec.RGB, where image/png gives an *image.RGBA, the same Rect and
// colours, alpha opaque), or an error with the same text.
func same(t testing.TB, data []byte) {
	t.Helper()
	want, wantErr := png.Decode(bytes.NewReader(data))
	got, gotErr := Decode(data)
	if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
		t.Fatalf("error: got %v, image/png %v", gotErr, wantErr)
	}
	if rgb, ok := got.(*spec.RGB); ok {
		w, ok := want.(*image.RGBA)
		if !ok || rgb.Rect != w.Rect || rgb.Stride != 3*w.Rect.Dx() || len(rgb.Pix) != 3*len(w.Pix)/4 {
			t.Fatalf("image differs from image/png's: got %T %v stride %d, want %T %v", got, got.Bounds(), rgb.Stride, want, want.Bounds())
		}
		expanded := make([]byte, len(w.Pix))
		spec.ExpandRGB(expanded, rgb.Pix)
		if !bytes.Equal(expanded, w.Pix) {
			t.Fatalf("pixels differ from image/png's (%T %v)", got, got.Bounds())
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("image differs from image/png's: got %T %v, want %T %v", got, got.Bounds(), want, want.Bounds())
	}
}

// fast checks that data takes the fast path and gives image/png's image.
func fast(t *testing.T, data []byte) {
	t.Helper()
	if decodeFast(data) == nil {
		t.Fatal("fast path declined a file it should decode")
	}
	same(t, data)
}

var (
	widths  = []int{1, 2, 3, 5, 64, 1023}
	heights = []int{1, 2, 7}
)

func TestEncodedByImagePNG(t *testing.T) {
	levels := []png.CompressionLevel{png.DefaultCompression, png.NoCompression, png.BestSpeed, png.BestCompression}
	for _, w := range widths {
		for _, h := range heights {
			rgb := image.NewRGBA(image.Rect(0, 0, w, h))
			nrgba := image.NewNRGBA(image.Rect(0, 0, w, h))
			for i, s := range samples(w, h, 4, 7) {
				copy(nrgba.Pix[i*4*w:], s)
				copy(rgb.Pix[i*4*w:], s)
			}
			for i := 3; i < len(rgb.Pix); i += 4 {
				rgb.Pix[i] = 0xff // opaque: image/png writes colour type 2
			}
			for _, lv := range levels {
				t.Run(fmt.Sprintf("%dx%d/level%d", w, h, lv), func(t *testing.T) {
					fast(t, encode(t, rgb, lv))
					fast(t, encode(t, nrgba, lv))
				})
			}
		}
	}
}

func TestForcedFilters(t *testing.T) {
	filters := map[string]func(int) byte{
		"none": func(int) byte { return 0 }, "sub": func(int) byte { return 1 },
		"up": func(int) byte { return 2 }, "average": func(int) byte { return 3 },
		"paeth": func(int) byte { return 4 }, "mixed": func(y int) byte { return byte(y*3) % 5 },
	}
	for name, filt := range filters {
		for _, ct := range []byte{2, 6} {
			for _, w := range widths {
				for _, h := range heights {
					t.Run(fmt.Sprintf("%s/ct%d/%dx%d", name, ct, w, h), func(t *testing.T) {
						fast(t, rgbFile(w, h, ct, filt))
					})
				}
			}
		}
	}
}

// TestChunkLayouts covers what image/png accepts around the pixel data: split and empty
// IDAT chunks, ancillary chunks, a truecolour PLTE, ignored later IDATs, data after IEND.
func TestChunkLayouts(t *testing.T) {
	z := deflate(filterRows(samples(9, 5, 3, 1), 3, func(y int) byte { return byte(y % 5) }))
	hdr, end := ihdr(9, 5, 8, 2, 0), chunk("IEND", nil)
	text := chunk("tEXt", []byte("Comment\x00hi"))
	var bytewise [][]byte
	for i := range z {
		bytewise = append(bytewise, chunk("IDAT", z[i:i+1]))
	}
	for name, data := range map[string][]byte{
		"split":       file(hdr, chunk("IDAT", z[:10]), chunk("IDAT", nil), chunk("IDAT", z[10:]), end),
		"bytewise":    file(append(append([][]byte{hdr}, bytewise...), end)...),
		"ancillary":   file(chunk("zzZz", []byte{1}), hdr, text, chunk("PLTE", make([]byte, 6)), chunk("IDAT", z), text, end),
		"laterIDAT":   file(hdr, chunk("IDAT", z), chunk("IDAT", []byte("junk")), text, chunk("IDAT", nil), end),
		"afterIEND":   append(file(hdr, chunk("IDAT", z), end), "trailing junk"...),
		"zeroFirst":   file(hdr, chunk("IDAT", nil), chunk("IDAT", z), end),
		"unknownCrit": file(hdr, chunk("ABCD", []byte{1, 2}), chunk("IDAT", z), end),
	} {
		t.Run(name, func(t *testing.T) { fast(t, data) })
	}
}

// TestOtherFormats checks inputs outside the fast path come back exactly as image/png's.
func TestOtherFormats(t *testing.T) {
	r := image.Rect(0, 0, 13, 6)
	pal := image.NewPaletted(r, color.Palette{color.Black, color.White, color.RGBA{200, 0, 0, 255}})
	gray, gray16 := image.NewGray(r), image.NewGray16(r)
	rgba64, nrgba64 := image.NewRGBA64(r), image.NewNRGBA64(r)
	for i := range pal.Pix {
		pal.Pix[i] = byte(i % 3)
		gray.Pix[i] = byte(i * 7)
	}
	for i := range rgba64.Pix {
		gray16.Pix[i%len(gray16.Pix)] = byte(i * 5)
		rgba64.Pix[i] = 0xff
		nrgba64.Pix[i] = byte(i * 11)
	}
	// An Adam7 interlaced RGB image, every pass unfiltered.
	var ilace []byte
	for _, p := range [][4]int{{8, 8, 0, 0}, {8, 8, 4, 0}, {4, 8, 0, 4}, {4, 4, 2, 0}, {2, 4, 0, 2}, {2, 2, 1, 0}, {1, 2, 0, 1}} {
		for y := p[3]; y < 6; y += p[1] {
			if p[2] < 13 {
				ilace = append(ilace, 0)
			}
			for x := p[2]; x < 13; x += p[0] {
				ilace = append(ilace, byte(x), byte(y), byte(x*y))
			}
		}
	}
	rgbRows := filterRows(samples(13, 6, 3, 2), 3, func(int) byte { return 4 })
	rgbaRows := filterRows(samples(13, 6, 4, 2), 4, func(int) byte { return 4 })
	for name, data := range map[string][]byte{
		"paletted":   encode(t, pal, png.DefaultCompression),
		"gray":       encode(t, gray, png.DefaultCompression),
		"gray16":     encode(t, gray16, png.DefaultCompression),
		"rgb16":      encode(t, rgba64, png.DefaultCompression),
		"rgba16":     encode(t, nrgba64, png.DefaultCompression),
		"interlaced": file(ihdr(13, 6, 8, 2, 1), chunk("IDAT", deflate(ilace)), chunk("IEND", nil)),
		"tRNS":       file(ihdr(13, 6, 8, 2, 0), chunk("tRNS", []byte{0, 4, 0, 6, 0, 0}), chunk("IDAT", deflate(rgbRows)), chunk("IEND", nil)),
		"tRNS-rgba":  file(ihdr(13, 6, 8, 6, 0), chunk("tRNS", make([]byte, 6)), chunk("IDAT", deflate(rgbaRows)), chunk("IEND", nil)),
	} {
		t.Run(name, func(t *testing.T) {
			if decodeFast(data) != nil {
				t.Fatal("fast path took a file it should leave to image/png")
			}
			same(t, data)
		})
	}
}

// broken returns malformed variations of valid files, keyed by a description.
func broken() map[string][]byte {
	rows := samples(6, 4, 3, 3)
	paeth := func(int) byte { return 4 }
	z := deflate(filterRows(rows, 3, paeth))
	hdr, end := ihdr(6, 4, 8, 2, 0), chunk("IEND", nil)
	good := file(hdr, chunk("IDAT", z), end)
	m := map[string][]byte{"good": good}
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 1; return b }
	m["crc/IHDR"] = flip(8 + 8 + 13)
	m["crc/IDAT"] = flip(len(good) - 13)
	m["crc/IEND"] = flip(len(good) - 1)
	m["data/IDAT"] = flip(8 + 25 + 8 + 5)
	for n := range len(good) {
		m[fmt.Sprint("truncated/", n)] = good[:n]
	}
	bad := filterRows(rows, 3, paeth)
	bad[2*(1+18)] = 5
	m["filter5"] = file(hdr, chunk("IDAT", deflate(bad)), end)
	m["extraRow"] = file(hdr, chunk("IDAT", deflate(filterRows(samples(6, 5, 3, 3), 3, paeth))), end)
	m["extraByte"] = file(hdr, chunk("IDAT", deflate(append(filterRows(rows, 3, paeth), 0))), end)
	m["missingRow"] = file(hdr, chunk("IDAT", deflate(filterRows(rows[:3], 3, paeth))), end)
	adler := bytes.Clone(z)
	adler[len(adler)-1] ^= 0x40
	m["adler"] = file(hdr, chunk("IDAT", adler), end)
	m["trailing/small"] = file(hdr, chunk("IDAT", append(bytes.Clone(z), 1, 2, 3)), end)
	m["trailing/large"] = file(hdr, chunk("IDAT", append(bytes.Clone(z), make([]byte, 9000)...)), end)
	m["splitByChunk"] = file(hdr, chunk("IDAT", z[:9]), chunk("tEXt", nil), chunk("IDAT", z[9:]), end)
	m["noIEND"] = file(hdr, chunk("IDAT", z))
	m["IENDlength"] = file(hdr, chunk("IDAT", z), chunk("IEND", []byte{0}))
	m["IDATfirst"] = file(chunk("IDAT", z), hdr, end)
	m["twoIHDR"] = file(hdr, hdr, chunk("IDAT", z), end)
	m["PLTEafterIDAT"] = file(hdr, chunk("IDAT", z), chunk("PLTE", make([]byte, 3)), end)
	m["PLTElength"] = file(hdr, chunk("PLTE", make([]byte, 4)), chunk("IDAT", z), end)
	m["noIDAT"] = file(hdr, end)
	m["zeroWidth"] = file(ihdr(0, 4, 8, 2, 0), chunk("IDAT", z), end)
	m["hugeChunk"] = file(hdr, chunk("IDAT", z), []byte{0x80, 0, 0, 0, 't', 'E', 'X', 't'}, end)
	m["notPNG"] = []byte("GIF89a")
	m["rgba"] = rgbFile(3, 3, 6, paeth)
	return m
}

func TestBrokenInputs(t *testing.T) {
	for name, data := range broken() {
		t.Run(name, func(t *testing.T) { same(t, data) })
	}
}

// TestNoGoroutineLeft checks that no inflater outlives Decode, in particular after an
// error found by the unfilter while the inflater is still running.
func TestNoGoroutineLeft(t *testing.T) {
	rows := samples(300, 400, 4, 5)
	stream := filterRows(rows, 4, func(int) byte { return 2 })
	stream[1+1200] = 9 // filter byte of row 1
	data := file(ihdr(300, 400, 8, 6, 0), chunk("IDAT", deflate(stream)), chunk("IEND", nil))
	before := runtime.NumGoroutine()
	for range 50 {
		same(t, data)
	}
	for _, data := range broken() {
		same(t, data)
	}
	for i := 0; runtime.NumGoroutine() > before; i++ {
		if i == 100 {
			t.Fatalf("%d goroutines left running", runtime.NumGoroutine()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fixCRCs rewrites the CRC of every complete chunk, so that mutations reach the pixel data.
func fixCRCs(data []byte) []byte {
	data = bytes.Clone(data)
	for p := 8; p+12 <= len(data); {
		n := int(binary.BigEndian.Uint32(data[p:]))
		if n > len(data)-p-12 {
			break
		}
		binary.BigEndian.PutUint32(data[p+8+n:], crc32.ChecksumIEEE(data[p+4:p+8+n]))
		p += 12 + n
	}
	return data
}

// fuzzInput turns FuzzDecode's arguments into a file, or nil to skip them.
func fuzzInput(data []byte, mode uint8) []byte {
	switch mode % 3 {
	case 1:
		return fixCRCs(data)
	case 2:
		if len(data) < 3 {
			return nil
		}
		// Height follows from the length; flag bits keep surplus bytes and raw filter types.
		w, ct, flags := 1+int(data[0]%64), 2+4*(data[2]&1), data[1]
		rs := 1 + w*map[byte]int{2: 3, 6: 4}[ct]
		rows := bytes.Clone(data[3:])
		h := len(rows) / rs
		if h == 0 {
			return nil
		}
		if flags&1 == 0 {
			rows = rows[:h*rs]
		}
		for y := 0; y < h && flags&2 == 0; y++ {
			rows[y*rs] %= 5
		}
		return file(ihdr(w, h, 8, ct, 0), chunk("IDAT", deflate(rows)), chunk("IEND", nil))
	}
	return data
}

// FuzzDecode checks Decode against image/png. mode 0 uses data as is, mode 1 with its CRCs
// fixed, and mode 2 as a width, flags, colour type and filtered row stream, compressed into a
// well-formed file: random bytes rarely get past the CRCs and zlib otherwise.
func FuzzDecode(f *testing.F) {
	for _, data := range broken() {
		f.Add(data, uint8(0))
		f.Add(data, uint8(1))
	}
	for _, filt := range []byte{0, 1, 2, 3, 4} {
		f.Add(rgbFile(5, 3, 2, func(int) byte { return filt }), uint8(0))
		f.Add(rgbFile(3, 2, 6, func(int) byte { return filt }), uint8(1))
		f.Add(append([]byte{4, 0, 0}, filterRows(samples(5, 3, 3, 9), 3, func(int) byte { return filt })...), uint8(2))
		f.Add(append([]byte{2, 0, 1}, filterRows(samples(3, 2, 4, 9), 4, func(int) byte { return filt })...), uint8(2))
	}
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		if data = fuzzInput(data, mode); data == nil {
			return
		}
		// image/png allocates what the header asks for; keep the fuzzer's memory sane.
		if c, err := png.DecodeConfig(bytes.NewReader(data)); err == nil && c.Width*c.Height > 1<<20 {
			t.Skip()
		}
		same(t, data)
	})
}

func BenchmarkDecode(b *testing.B) {
	data, err := fixtures.Image("chelsea.png", 1024, 1024)
	if err != nil {
		b.Fatal(err)
	}
	same(b, data)
	if decodeFast(data) == nil {
		b.Fatal("fixture does not take the fast path")
	}
	b.Run("image-png", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := png.Decode(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pngread", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The parallel decode's shape: parts of the inflate, goroutines of the unfilter.
	defer func(p, u int, procs func() int) {
		maxParts, maxUnfilters, decodeProcs = p, u, procs
	}(maxParts, maxUnfilters, decodeProcs)
	decodeProcs = func() int { return 64 } // the shape is set here
	for _, p := range []int{1, 2, 4, 8} {
		for _, u := range []int{1, 2, 4, 6} {
			if p > runtime.GOMAXPROCS(0) || u > runtime.GOMAXPROCS(0) {
				continue
			}
			maxParts, maxUnfilters = p, u
			b.Run(fmt.Sprintf("pngread-parts-%d-unfilters-%d", p, u), func(b *testing.B) {
				for b.Loop() {
					if decodeFast(data) == nil {
						b.Fatal("the fast path failed")
					}
				}
			})
		}
	}
}

// TestStatesKept: decode states outlive a garbage collection, at most two of them, and none
// for images past the size kept.
func TestStatesKept(t *testing.T) {
	for len(fastStates) > 0 {
		<-fastStates
	}
	a, b, c := getState(), getState(), getState()
	a.filtered, b.filtered, c.filtered = make([]byte, 10), make([]byte, 20), make([]byte, 30)
	putState(a)
	putState(b)
	putState(c)
	runtime.GC()
	got := []int{len(getState().filtered), len(getState().filtered), len(getState().filtered)}
	if got[0] != 10 || got[1] != 20 || got[2] != 0 {
		t.Fatalf("states after putting three and a GC: filtered lengths %v, want [10 20 0]", got)
	}
	big := &fastState{filtered: make([]byte, keepStateBytes+1)}
	putState(big)
	if st := getState(); st == big {
		t.Fatal("a state past keepStateBytes was kept")
	}
	bigParts := &fastState{parts: []*part{{sym: make([]uint16, keepStateBytes/2)}}}
	putState(bigParts)
	if st := getState(); st == bigParts {
		t.Fatal("a state whose parts are past keepStateBytes was kept")
	}
}

// BenchmarkUnfilter unfilters the 1024² photo's rows, inflated already, on 1 to 6 goroutines.
func BenchmarkUnfilter(b *testing.B) {
	data, err := fixtures.Image("chelsea.png", 1024, 1024)
	if err != nil {
		b.Fatal(err)
	}
	w, h, _, idat, _ := scan(data)
	filtered, pix := make([]byte, h*(1+3*w)), make([]byte, h*3*w)
	if _, ok := new(inflater).zlibStream(filtered, bytes.Join(idat, nil), nil, 0, nil); !ok {
		b.Fatal("inflate failed")
	}
	st := new(fastState)
	for _, g := range []int{1, 2, 4, 6} {
		b.Run(fmt.Sprintf("goroutines-%d", g), func(b *testing.B) {
			in := newInflated()
			in.publish(len(filtered))
			for b.Loop() {
				if !unfilterRows(st, pix, filtered, w, h, 3, g, in) {
					b.Fatal("unfilter failed")
				}
			}
		})
	}
}
