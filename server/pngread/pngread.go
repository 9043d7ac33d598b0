// Package pngread decodes PNG uploads faster than image/png for the layouts we receive
// (8-bit RGB/RGBA, not interlaced) and defers to image/png for everything else. With cores to
// spare it inflates the stream in parallel parts (parallel.go) and unfilters rows on several
// goroutines (unfilterRows), the output always the serial decode's.
package pngread

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/png"
	"runtime"
	"sync"
	"sync/atomic"

	"mediaqual/models/spec"
)

// Decode decodes a PNG as image/png.Decode does (same bounds, pixels and, for inputs it
// cannot decode, an error), faster for the common upload layouts.
//
// The fast path handles bit depth 8, colour type 2 or 6, no interlace, no tRNS. It gives up
// on anything unusual or wrong and returns image/png.Decode's result instead, so errors (and
// every edge case image/png tolerates or rejects) are always image/png's own. An RGB file
// (colour type 2) it decodes as a *spec.RGB, the file's own layout, where image/png gives
// an *image.RGBA with opaque alpha: an edit's reference then goes to an out-of-process Task
// as it is, and the decoder writes 3 bytes a pixel, not 4.
func Decode(data []byte) (image.Image, error) {
	if img := decodeFast(data); img != nil {
		return img, nil
	}
	return png.Decode(bytes.NewReader(data))
}

// batchBytes sets how much inflated data goes with one hand-over to the unfiltering goroutines.
const batchBytes = 64 << 10

// fastState is what a fast-path decode needs besides the image: the inflater's tables, the
// parallel inflate's parts, the filtered rows and, when the stream spans several IDAT chunks,
// the joined stream. Kept for the next decode (fastStates), as they are megabytes for a photo.
type fastState struct {
	inf      inflater
	parts    []*part
	filtered []byte
	joined   []byte
	rowsDone []rowProgress
}

// fastStates keeps up to two states between decodes, not a sync.Pool: a pool is emptied by
// the garbage collector, which a server runs between its edits, and a 1024² reference's 3 MB
// of filtered rows then came back as fresh pages to fault in (server's
// BenchmarkImageEditReceiveAfterIdle: receive 27.6-28.6 ms p50 with a pool, 23.8-25.7 with
// these). States of more than keepStateBytes (an RGBA image past 4096x2048, or a parallel
// decode's parts past about 12 MB of output) are not kept.
var fastStates = make(chan *fastState, 2)

const keepStateBytes = 4096 * 2048 * 4

func getState() *fastState {
	select {
	case st := <-fastStates:
		return st
	default:
		return new(fastState)
	}
}

func putState(st *fastState) {
	if st.bytes() > keepStateBytes {
		return
	}
	select {
	case fastStates <- st:
	default:
	}
}

// bytes is about how much memory the state holds.
func (st *fastState) bytes() int {
	n := cap(st.filtered) + cap(st.joined)
	for _, c := range st.parts {
		n += 2*cap(c.sym) + cap(c.lit) + len(c.win)
	}
	return n
}

// decodeFast returns nil whenever it cannot vouch that image/png would return the same pixels.
func decodeFast(data []byte) image.Image {
	w, h, ct, idat, ok := scan(data)
	if !ok {
		return nil
	}
	bpp := 3
	if ct == 6 {
		bpp = 4
	}
	rowLen := 1 + bpp*w // a filtered row: the filter type, then the samples
	zlen := 0
	for _, c := range idat {
		zlen += len(c)
	}
	// DEFLATE expands at most 1032-fold: leave streams too short for the image to image/png
	// before allocating for it.
	if h*rowLen/1032 > zlen {
		return nil
	}
	var img image.Image
	var pix []byte
	if ct == 2 {
		m := spec.NewRGB(image.Rect(0, 0, w, h))
		img, pix = m, m.Pix
	} else {
		m := image.NewNRGBA(image.Rect(0, 0, w, h))
		img, pix = m, m.Pix
	}
	st := getState()
	defer putState(st) // only once every goroutine has stopped: see below
	if cap(st.filtered) < h*rowLen {
		st.filtered = make([]byte, h*rowLen)
	}
	filtered := st.filtered[:h*rowLen]
	nparts, unfilters := shape(zlen, decodeProcs())
	for len(st.parts) < nparts-1 {
		st.parts = append(st.parts, new(part))
	}
	parts := st.parts[:nparts-1]

	// The inflater publishes how much of filtered is final; the rows below that are unfiltered
	// meanwhile, into the image: matches may still copy from the filtered bytes.
	in := newInflated()
	var inflater sync.WaitGroup
	inflater.Go(func() {
		if !inflateIDAT(st, filtered, idat, zlen, parts, in.publish) {
			in.fail()
		}
	})
	ok = unfilterRows(st, pix, filtered, w, h, bpp, unfilters, in)
	inflater.Wait()              // no goroutine outlives Decode
	if !ok || in.failed.Load() { // the adler32 is checked after the last rows are published
		return nil
	}
	return img
}

// inflated is how much of the filtered rows the inflater has made final, or that the decode
// failed. The unfilter goroutines sleep while they wait for rows: the inflater is the slower
// side on a machine with few cores, and a spinning wait would take a core from it.
type inflated struct {
	n       atomic.Int64
	failed  atomic.Bool
	waiters atomic.Int32
	mu      sync.Mutex
	cond    sync.Cond
}

func newInflated() *inflated {
	in := new(inflated)
	in.cond.L = &in.mu
	return in
}

// publish notes that the first n bytes are final; it reports false once the decode failed.
func (in *inflated) publish(n int) bool {
	in.n.Store(int64(n))
	in.wake()
	return !in.failed.Load()
}

func (in *inflated) fail() {
	in.failed.Store(true)
	in.wake()
}

// wake wakes the sleeping waiters. A waiter counts itself before it looks at n under the
// lock, so it either sees the new n or is woken here.
func (in *inflated) wake() {
	if in.waiters.Load() > 0 {
		in.mu.Lock()
		in.cond.Broadcast()
		in.mu.Unlock()
	}
}

// wait returns true once n bytes are final, false once the decode failed.
func (in *inflated) wait(n int) bool {
	for range 100 { // a short spin first: the rows are often there already
		if in.failed.Load() {
			return false
		}
		if in.n.Load() >= int64(n) {
			return true
		}
	}
	in.waiters.Add(1)
	in.mu.Lock()
	for in.n.Load() < int64(n) && !in.failed.Load() {
		in.cond.Wait()
	}
	in.mu.Unlock()
	in.waiters.Add(-1)
	return !in.failed.Load()
}

// inflateIDAT decompresses the IDAT payloads' zlib stream into filtered, which it must fill
// exactly, in parallel with parts, publishing progress, and checks the stream's end the way image/png does.
func inflateIDAT(st *fastState, filtered []byte, idat [][]byte, zlen int, parts []*part, publish func(int) bool) bool {
	var z []byte
	switch len(idat) {
	case 0:
	case 1:
		z = idat[0]
	default:
		if cap(st.joined) < zlen {
			st.joined = make([]byte, 0, zlen)
		}
		z = st.joined[:0]
		for _, c := range idat {
			z = append(z, c...)
		}
	}
	end, ok := st.inf.zlibStream(filtered, z, parts, batchBytes, publish)
	if !ok {
		return false
	}
	// image/png reads until io.EOF and rejects further pixel data; it accepts leftover bytes in
	// the last IDAT chunk only if its bufio.Reader happened to swallow them, so we insist the
	// stream ends exactly at a chunk boundary. Later IDAT chunks are ignored.
	for _, c := range idat {
		if end -= len(c); end <= 0 {
			return end == 0
		}
	}
	return false
}

// scan walks the chunks up to IEND with image/png's ordering, length and CRC rules. It
// reports ok only for a fast-path image; the IDAT payloads are those of the first run of
// consecutive IDAT chunks, the only ones image/png reads pixels from.
func scan(data []byte) (w, h, ct int, idat [][]byte, ok bool) {
	const (
		start = iota
		seenIHDR
		seenPLTE
		inIDAT // within the first run of IDAT chunks
		seenIDAT
	)
	if len(data) < 8 || string(data[:8]) != "\x89PNG\r\n\x1a\n" {
		return
	}
	stage := start
	for p := 8; ; {
		if len(data)-p < 12 {
			return
		}
		n := binary.BigEndian.Uint32(data[p:])
		if n > 0x7fffffff || int(n) > len(data)-p-12 {
			return
		}
		typ, body := string(data[p+4:p+8]), data[p+8:p+8+int(n)]
		if crc32.ChecksumIEEE(data[p+4:p+8+int(n)]) != binary.BigEndian.Uint32(data[p+8+int(n):]) {
			return
		}
		p += 12 + int(n)
		if stage == inIDAT && typ != "IDAT" {
			stage = seenIDAT
		}
		switch typ {
		case "IHDR":
			if stage != start || n != 13 {
				return
			}
			w = int(int32(binary.BigEndian.Uint32(body[0:])))
			h = int(int32(binary.BigEndian.Uint32(body[4:])))
			ct = int(body[9])
			// Depth 8, colour type 2 or 6, compression, filter and interlace method 0; absurd
			// sizes are left to image/png's own checks.
			if w <= 0 || h <= 0 || w*h >= 1<<40 || body[8] != 8 || (ct != 2 && ct != 6) ||
				body[10] != 0 || body[11] != 0 || body[12] != 0 {
				return
			}
			stage = seenIHDR
		case "PLTE": // a suggested palette, which image/png ignores for truecolour
			if stage != seenIHDR || n%3 != 0 || n == 0 || n > 3*256 {
				return
			}
			stage = seenPLTE
		case "tRNS": // turns colour type 2 into *image.NRGBA: leave it to image/png
			return
		case "IDAT":
			switch stage {
			case start:
				return
			case seenIHDR, seenPLTE:
				stage = inIDAT
				fallthrough
			case inIDAT:
				if n > 0 {
					idat = append(idat, body)
				}
			} // later IDAT chunks are ignored, as image/png does
		case "IEND":
			if stage < inIDAT || n != 0 {
				return
			}
			return w, h, ct, idat, true
		}
	}
}

// maxUnfilters caps the goroutines unfilterRows uses; segmentPixels is the width of the
// segments they hand on to the next row: a wake-up costs about what 100 pixels do.
const segmentPixels = 128

var maxUnfilters = 4 // a variable for benchmarks and tests

// unfilterRows undoes the rows' filters into pix on g goroutines, this one among them: row y
// on goroutine y%g, once the inflater has published it, in segments that each start when the
// row above has done the same segment (the Up, Average and Paeth filters read the row above
// up to the same pixel). A bad filter type, or a failure of the inflater, stops them all.
func unfilterRows(st *fastState, pix, filtered []byte, w, h, bpp, g int, in *inflated) bool {
	if cap(st.rowsDone) < h {
		st.rowsDone = make([]rowProgress, h)
	}
	done := st.rowsDone[:h]
	for i := range done {
		done[i].segments.Store(0)
	}
	rowLen, stride, seg := 1+bpp*w, bpp*w, bpp*segmentPixels
	nseg := (stride + seg - 1) / seg
	zero := make([]byte, stride)
	// above spins until row y's segment s is done, or a failure, now and then yielding to other
	// goroutines: the row above is being unfiltered, so the wait is short, and yielding every
	// time contends for the scheduler's queue.
	above := func(y, s int) bool {
		for i := 1; done[y].segments.Load() <= int32(s); i++ {
			if i%64 == 0 {
				if in.failed.Load() {
					return false
				}
				runtime.Gosched()
			}
		}
		return true
	}
	rows := func(first int) {
		for y := first; y < h; y += g {
			if !in.wait((y + 1) * rowLen) {
				return
			}
			row, cur, prev := filtered[y*rowLen:(y+1)*rowLen], pix[y*stride:(y+1)*stride], zero
			if y > 0 {
				prev = pix[(y-1)*stride : y*stride]
			}
			for s := range nseg {
				if y > 0 && !above(y-1, s) {
					return
				}
				end := min((s+1)*seg, stride)
				if !unfilter(row[0], cur[:end], prev[:end], row[1:end+1], bpp, s*seg) {
					in.fail()
					return
				}
				done[y].segments.Store(int32(s + 1))
			}
		}
	}
	var others sync.WaitGroup
	for i := 1; i < g; i++ {
		others.Go(func() { rows(i) })
	}
	rows(0)
	others.Wait()
	return !in.failed.Load()
}

// rowProgress counts a row's segments unfiltered, alone in its cache line: rows next to each
// other are on different goroutines.
type rowProgress struct {
	segments atomic.Int32
	_        [60]byte
}

// unfilter undoes filter f on one row of filtered samples src (bpp bytes per pixel) into
// cur, given the row above, prev, decoded, from byte from (a pixel boundary: cur's bytes
// before it are decoded). It reports false for an invalid filter type.
func unfilter(f byte, cur, prev, src []byte, bpp, from int) bool {
	n := min(len(cur), len(prev), len(src))
	cur, prev, src = cur[:n], prev[:n], src[:n]
	switch f {
	case 0:
		copy(cur[from:], src[from:])
	case 1:
		i := from
		for ; i < min(bpp, n); i++ {
			cur[i] = src[i]
		}
		for ; i < n; i++ {
			cur[i] = src[i] + cur[i-bpp]
		}
	case 2:
		for i := from; i < n; i++ {
			cur[i] = src[i] + prev[i]
		}
	case 3:
		i := from
		for ; i < min(bpp, n); i++ {
			cur[i] = src[i] + prev[i]>>1
		}
		for ; i < n; i++ {
			cur[i] = src[i] + byte((uint(cur[i-bpp])+uint(prev[i]))>>1)
		}
	case 4:
		if bpp == 3 {
			paeth3(cur, prev, src, from)
		} else {
			paeth4(cur, prev, src, from)
		}
	default:
		return false
	}
	return true
}
