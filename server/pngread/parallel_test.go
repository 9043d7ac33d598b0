package pngread

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/adler32"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"mediaqual/fixtures"
)

// newParts returns n-1 parts: an inflate in n.
func newParts(n int) []*part {
	ps := make([]*part, n-1)
	for i := range ps {
		ps[i] = new(part)
	}
	return ps
}

// agreeParallel checks inflateParallel against inflate on in, with out of size n: the same
// success, output, stream end and, on success, the output's adler32. It returns how many parts
// were placed, and how many of those switched to bytes.
func agreeParallel(t *testing.T, in []byte, n, nparts int, what string) (placed, bytesMode int) {
	t.Helper()
	want, got := make([]byte, n), make([]byte, n)
	wn, wend, wok := new(inflater).inflate(want, in, 0, nil)
	parts := newParts(nparts)
	gn, gend, sum, gok := new(inflater).inflateParallel(got, in, parts, 0, nil)
	if gok != wok || gok && (gn != wn || gend != wend || !bytes.Equal(got, want) || sum != adler32.Checksum(want[:wn])) {
		t.Fatalf("%s, %d parts: parallel ok %v, %d bytes, end %d, same bytes %v, adler32 %08x; serial ok %v, %d bytes, end %d, adler32 %08x",
			what, nparts, gok, gn, gend, bytes.Equal(got, want), sum, wok, wn, wend, adler32.Checksum(want[:wn]))
	}
	for _, c := range parts {
		if c.op >= 0 {
			placed++
			if c.nlit > 0 {
				bytesMode++
			}
		}
	}
	return placed, bytesMode
}

// TestInflateParallelMatchesSerial: over inputs of every kind in many blocks of every type
// (stored, fixed, dynamic; flushed or not), an inflate in 2 to 8 parts gives the serial
// output, stream end and checksum. Parts must be placed, some of them after switching to
// bytes and some not, or the test would only show the serial fallback.
func TestInflateParallelMatchesSerial(t *testing.T) {
	placed, bytesMode, symbols := 0, 0, 0
	for _, n := range []int{3 << 10, 100 << 10, 300 << 10} {
		for name, in := range inputs(n) {
			for _, level := range []int{flate.NoCompression, flate.BestSpeed, flate.DefaultCompression, flate.HuffmanOnly} {
				for _, flush := range []int{0, 7000} {
					z := deflateRaw(t, in, level, flush)
					for _, nparts := range []int{2, 3, 8} {
						p, b := agreeParallel(t, z, len(in), nparts, fmt.Sprintf("%s %d bytes, level %d, flush %d", name, n, level, flush))
						placed, bytesMode, symbols = placed+p, bytesMode+b, symbols+p-b
					}
					// No room for the last byte: both fail.
					agreeParallel(t, z, len(in)-1, 4, fmt.Sprintf("%s %d bytes, level %d, flush %d, a byte short", name, n, level, flush))
				}
			}
		}
	}
	t.Logf("parts placed: %d, %d of them switched to bytes", placed, bytesMode)
	if placed == 0 || bytesMode == 0 || symbols == 0 {
		t.Fatalf("parts placed %d, switched to bytes %d, symbols to the end %d: a path went untested", placed, bytesMode, symbols)
	}
}

// TestInflateParallelBroken: flipped bits and truncations anywhere in a stream make the
// parallel inflate fail exactly where the serial one does, and give its bytes where it does
// not (a flip in a literal's extra bits still decodes).
func TestInflateParallelBroken(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m := inputs(200 << 10)
	for _, name := range slices.Sorted(maps.Keys(m)) { // the same flips every run
		in := m[name]
		z := deflateRaw(t, in, flate.DefaultCompression, 9000)
		for i := range 60 {
			bad := bytes.Clone(z)
			for range 1 + i%3 {
				p := r.IntN(len(bad) * 8)
				bad[p/8] ^= 1 << (p % 8)
			}
			agreeParallel(t, bad, len(in), 2+i%7, fmt.Sprintf("%s with flipped bits (%d)", name, i))
		}
		for _, cut := range []int{1, len(z) / 3, len(z) / 2, len(z) - 1} {
			agreeParallel(t, z[:cut], len(in), 4, fmt.Sprintf("%s cut to %d of %d bytes", name, cut, len(z)))
		}
	}
}

// photoStream returns a fixture photo at 1024² as a PNG and its zlib stream.
func photoStream(t testing.TB, name string) (png, z []byte, w, h int) {
	png, err := fixtures.Image(name, 1024, 1024)
	if err != nil {
		t.Fatal(err)
	}
	w, h, _, idat, ok := scan(png)
	if !ok {
		t.Fatalf("%s: not a fast-path PNG", name)
	}
	return png, bytes.Join(idat, nil), w, h
}

// TestInflateParallelPlacesParts: on the edits' photos, every part is placed, and the markers
// never die out (photos' matches keep copying from the first window), so each part resolves
// its symbols.
func TestInflateParallelPlacesParts(t *testing.T) {
	for _, name := range []string{"chelsea.png", "astronaut.png", "coffee.png", "rocket.png"} {
		_, z, w, h := photoStream(t, name)
		placed, _ := agreeParallel(t, z[2:len(z)-4], h*(1+3*w), 8, name)
		if placed != 7 {
			t.Errorf("%s: %d of 7 parts placed", name, placed)
		}
	}
}

// TestDecodeParallel decodes the photos with the shapes of 2, 4 and 64 cores, a broken filter
// type, a broken byte of the stream and a broken adler32 among them, against image/png; valid
// ones must take the fast path. (The adler32 is checked after the last rows are published: on
// a photo the unfilter is done by then.)
func TestDecodeParallel(t *testing.T) {
	defer func(procs func() int) { decodeProcs = procs }(decodeProcs)
	for _, procs := range []int{2, 4, 64} {
		decodeProcs = func() int { return procs }
		for _, name := range []string{"chelsea.png", "astronaut.png", "coffee.png", "rocket.png"} {
			data, _, _, _ := photoStream(t, name)
			if decodeFast(data) == nil {
				t.Fatalf("%s: the fast path failed", name)
			}
			same(t, data)
			// A flipped byte in the IDAT chunk, CRC fixed: DEFLATE data or a filter type gone
			// wrong, found by the inflater, its adler32 or the unfilter; the last flip is in the
			// adler32 itself (IDAT is the last chunk before IEND: its CRC and IEND follow).
			for _, at := range []int{len(data) / 4, len(data) / 2, 3 * len(data) / 4, len(data) - 12 - 4 - 1} {
				bad := bytes.Clone(data)
				bad[at] ^= 0x5a
				same(t, fixCRCs(bad))
			}
		}
	}
}

// TestFindBlock: findBlock stops at a real dynamic block's first bit and not before it in
// a stretch of zeros (BTYPE 0).
func TestFindBlock(t *testing.T) {
	z := deflateRaw(t, inputs(50 << 10)["text"], flate.DefaultCompression, 0)
	in := append(make([]byte, 64), z...) // 64 zero bytes, then a stream that starts with a dynamic block
	in[64] &^= 1 // BFINAL 0, as findBlock wants
	if got := findBlock(in, 0, len(in)*8); got != 64*8 {
		t.Fatalf("findBlock found bit %d, want %d", got, 64*8)
	}
	if got := findBlock(in, 0, 64*8); got != -1 {
		t.Fatalf("findBlock found bit %d in zeros", got)
	}
}

// BenchmarkInflateParallel inflates the 1024² photo's IDAT stream serially and in 2 to 8 parts.
func BenchmarkInflateParallel(b *testing.B) {
	_, z, w, h := photoStream(b, "chelsea.png")
	out := make([]byte, h*(1+3*w))
	var d inflater
	for _, n := range []int{1, 2, 4, 8} {
		parts := newParts(n)
		b.Run(fmt.Sprintf("parts-%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(out)))
			for b.Loop() {
				if _, ok := d.zlibStream(out, z, parts, 0, nil); !ok {
					b.Fatal("inflate failed")
				}
			}
		})
	}
}

// TestUnfilterRowsParallel decodes images of every filter type, mixed row by row, at widths
// around the segment size, on 1 to 6 goroutines, against image/png through the fast path.
func TestUnfilterRowsParallel(t *testing.T) {
	defer func(u int, procs func() int) { maxUnfilters, decodeProcs = u, procs }(maxUnfilters, decodeProcs)
	decodeProcs = func() int { return 64 }
	r := rand.New(rand.NewPCG(9, 10))
	for _, g := range []int{1, 2, 3, 6} {
		maxUnfilters = g
		for _, w := range []int{1, 2, segmentPixels - 1, segmentPixels, segmentPixels + 1, 3*segmentPixels + 5} {
			for _, ct := range []byte{2, 6} {
				data := rgbFile(w, 37, ct, func(int) byte { return byte(r.IntN(5)) })
				if decodeFast(data) == nil {
					t.Fatalf("%d goroutines, %d pixels wide, colour type %d: the fast path failed", g, w, ct)
				}
				same(t, data)
			}
		}
	}
}

// TestInflateParallelSwitch: a part switches to bytes only once its last window symbols hold
// no marker. Hand-built: 40000 stored bytes, then a part that copies 3 bytes from 32768 back
// (markers), writes 32697 literals and ends its block 32698 symbols after the last marker;
// the next block copies that marker from 32698 back. A part that switched at the first
// block's end would have lost it.
func TestInflateParallelSwitch(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	stored := make([]byte, 40000)
	for i := range stored {
		stored[i] = byte(r.Uint32())
	}
	var w bitWriter
	w.header(false, 0, 0, 0, code{})
	w.bytes()
	w.out = binary.LittleEndian.AppendUint16(w.out, uint16(len(stored)))
	w.out = binary.LittleEndian.AppendUint16(w.out, ^uint16(len(stored)))
	w.out = append(w.out, stored...)
	litLens := make([]uint8, 259)
	litLens['a'], litLens[256], litLens[257], litLens[258] = 1, 2, 3, 3
	distLens := make([]uint8, 30)
	distLens[29] = 1 // distances 24577-32768
	lit, dist := newCode(litLens), newCode(distLens)
	w.dynamic(false, litLens, distLens)
	w.match(lit, dist, 0, 0, 29, 32768-24577)
	for range 32697 {
		w.sym(lit, 'a')
	}
	w.sym(lit, 256)
	w.dynamic(true, litLens, distLens)
	w.match(lit, dist, 0, 0, 29, 32698-24577)
	w.sym(lit, 256)
	in := w.bytes()

	placed, bytesMode := agreeParallel(t, in, 40000+32700+3, 2, "hand-built")
	if placed != 1 || bytesMode != 0 {
		t.Fatalf("parts placed %d, switched to bytes %d; want 1 and 0", placed, bytesMode)
	}
}

// TestUnfilterWaitsForRows feeds unfilterRows one filtered row at a time, each published
// after it is written, over garbage: a goroutine that read a row before its publication would
// decode the garbage.
func TestUnfilterWaitsForRows(t *testing.T) {
	const w, h, bpp = 300, 40, 3
	filtered := filterRows(samples(w, h, bpp, 13), bpp, func(y int) byte { return byte(y % 5) })
	rowLen := 1 + bpp*w
	want := make([]byte, w*h*bpp)
	all := newInflated()
	all.publish(len(filtered))
	if !unfilterRows(new(fastState), want, filtered, w, h, bpp, 1, all) {
		t.Fatal("unfilter failed")
	}
	for _, g := range []int{1, 3} {
		buf, got := bytes.Repeat([]byte{0xee}, len(filtered)), make([]byte, len(want))
		in := newInflated()
		go func() {
			for y := range h {
				time.Sleep(100 * time.Microsecond)
				copy(buf[y*rowLen:], filtered[y*rowLen:(y+1)*rowLen])
				in.publish((y + 1) * rowLen)
			}
		}()
		if !unfilterRows(new(fastState), got, buf, w, h, bpp, g, in) || !bytes.Equal(got, want) {
			t.Fatalf("%d goroutines: rows decoded before they were published", g)
		}
	}
}

// TestUnfilterStopsOnFailure: the inflater failing, or a bad filter type, ends every unfilter
// goroutine, those asleep waiting for rows among them.
func TestUnfilterStopsOnFailure(t *testing.T) {
	const w, h, bpp = 300, 40, 3
	filtered := filterRows(samples(w, h, bpp, 14), bpp, func(y int) byte { return byte(y % 5) })
	for _, g := range []int{1, 3} {
		in := newInflated()
		in.publish(5 * (1 + bpp*w)) // five rows, then the inflater fails
		go func() {
			time.Sleep(10 * time.Millisecond)
			in.fail()
		}()
		if unfilterRows(new(fastState), make([]byte, w*h*bpp), filtered, w, h, bpp, g, in) {
			t.Fatalf("%d goroutines: unfilter succeeded after the inflater failed", g)
		}
		bad := bytes.Clone(filtered)
		bad[7*(1+bpp*w)] = 5 // row 7's filter type
		in = newInflated()
		in.publish(len(bad))
		if unfilterRows(new(fastState), make([]byte, w*h*bpp), bad, w, h, bpp, g, in) {
			t.Fatalf("%d goroutines: unfilter succeeded with filter type 5", g)
		}
	}
}
