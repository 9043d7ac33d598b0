// Package pngread decodes PNG uploads faster than image/png for the layouts we receive
// (8-bit RGB/RGBA, not interlaced) and defers to image/png for everything else.
package pngread

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/png"

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

// batchBytes sets how much inflated data goes with one hand-over to the unfiltering caller:
// a channel operation per row would cost a wake-up per row when it keeps up.
const batchBytes = 64 << 10

// fastState is what a fast-path decode needs besides the image: the inflater's tables, the
// filtered rows and, when the stream spans several IDAT chunks, the joined stream. Kept for
// the next decode (fastStates), as they are megabytes for a photo.
type fastState struct {
	inf      inflater
	filtered []byte
	joined   []byte
}

// fastStates keeps up to two states between decodes, not a sync.Pool: a pool is emptied by
// the garbage collector, which a server runs between its edits, and a 1024² reference's 3 MB
// of filtered rows then came back as fresh pages to fault in (server's
// BenchmarkImageEditReceiveAfterIdle: receive 27.6-28.6 ms p50 with a pool, 23.8-25.7 with
// these). States for images past 4096x2048 are not kept.
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
	if cap(st.filtered)+cap(st.joined) > keepStateBytes {
		return
	}
	select {
	case fastStates <- st:
	default:
	}
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
	defer putState(st) // only once the inflater has stopped: see below
	if cap(st.filtered) < h*rowLen {
		st.filtered = make([]byte, h*rowLen)
	}
	filtered := st.filtered[:h*rowLen]

	// The inflater publishes how much of filtered is final; the rows below that are unfiltered
	// here meanwhile, into the image: matches may still copy from the filtered bytes.
	ready := make(chan int, 4)
	done := make(chan struct{})
	var inflOK bool
	go func() {
		defer close(ready)
		inflOK = inflateIDAT(st, filtered, idat, zlen, func(n int) bool {
			select {
			case ready <- n:
				return true
			case <-done:
				return false
			}
		})
	}()

	stride := bpp * w
	zero := make([]byte, stride)
	prev, y := zero, 0
	for n := range ready {
		for ; y < h && (y+1)*rowLen <= n; y++ {
			row, cur := filtered[y*rowLen:(y+1)*rowLen], pix[y*stride:(y+1)*stride]
			if !unfilter(row[0], cur, prev, row[1:], bpp) {
				close(done)
				for range ready { // wait for the inflater to stop: no goroutine outlives Decode
				}
				return nil
			}
			prev = cur
		}
	}
	if !inflOK || y != h {
		return nil
	}
	return img
}

// inflateIDAT decompresses the IDAT payloads' zlib stream into filtered, which it must fill
// exactly, publishing progress, and checks the stream's end the way image/png does.
func inflateIDAT(st *fastState, filtered []byte, idat [][]byte, zlen int, publish func(int) bool) bool {
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
	end, ok := st.inf.zlibStream(filtered, z, batchBytes, publish)
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

// unfilter undoes filter f on one row of filtered samples src (bpp bytes per pixel) into
// cur, given the row above, prev, decoded. It reports false for an invalid filter type.
func unfilter(f byte, cur, prev, src []byte, bpp int) bool {
	n := min(len(cur), len(prev), len(src))
	cur, prev, src = cur[:n], prev[:n], src[:n]
	switch f {
	case 0:
		copy(cur, src)
	case 1:
		copy(cur[:min(bpp, n)], src)
		for i := bpp; i < n; i++ {
			cur[i] = src[i] + cur[i-bpp]
		}
	case 2:
		for i := range n {
			cur[i] = src[i] + prev[i]
		}
	case 3:
		for i := range min(bpp, n) {
			cur[i] = src[i] + prev[i]>>1
		}
		for i := bpp; i < n; i++ {
			cur[i] = src[i] + byte((uint(cur[i-bpp])+uint(prev[i]))>>1)
		}
	case 4:
		if bpp == 3 {
			paeth3(cur, prev, src, 0)
		} else {
			paeth4(cur, prev, src, 0)
		}
	default:
		return false
	}
	return true
}
