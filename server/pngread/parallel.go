package pngread

import (
	"encoding/binary"
	"hash/adler32"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"mediaqual/internal/adler"
)

// A parallel inflate for one large stream held whole, with speculative parts (the method of
// pugz and rapidgzip). The stream is cut into byte ranges; a goroutine for each range but the
// first looks for the first bit there that starts a plausible dynamic-Huffman block and
// decodes from it without the 32 KiB window before it: bytes copied from that window are
// written as markers, which stop being needed once 32 KiB of output hold none. Meanwhile the
// caller decodes the first range for real. A part is used only when the real decode reaches
// a block boundary at exactly the bit where that part started; its markers are then looked
// up in the real output. Since a block's symbols do not depend on the window, the output is
// the serial decode's, byte for byte; a part that started at a false block, or at none, is
// dropped and its range decoded serially. zlibStream still checks the adler32 of the whole.

const (
	window = 1 << 15 // DEFLATE's longest distance

	// minPartBytes is the least compressed input a part covers: a photo's blocks are tens of
	// KiB (compress/flate and zlib end one every 16 Ki symbols), so a part holds a few.
	minPartBytes = 128 << 10

	symPause = 16 << 10  // symbols between checks for the last marker
	litPause = 256 << 10 // bytes between growths of a part's byte output
)

var maxParts = 8 // a variable for benchmarks and tests

// part is one speculative part of a parallel inflate.
type part struct {
	inf      inflater
	from, to int  // look for a block start at bits [from, to) of the input; stop at a boundary at or past to
	start    int  // the bit it decoded from
	end      int  // the boundary it stopped at
	final    bool // it decoded the final block
	ok       bool
	// The output: sym[:nsym] as symbols, a byte value or the marker 255+d for the byte d
	// before the part (1 <= d <= 32768); then, once sym's last window symbols hold no
	// marker, lit[window:nlit], lit[:window] being those symbols as bytes (the history).
	sym        []uint16
	lit        []byte
	nsym, nlit int
	done       chan struct{}

	op   int            // where its output went; -1 until placed
	win  [1 << 16]byte  // what its symbols stand for (a symbol indexes it without a bounds check)
	head sync.WaitGroup // its output's head being resolved and the whole hashed
	hash piece          // the adler32 of its output
}

// size is the part's output in bytes.
func (c *part) size() int { return c.nsym + max(c.nlit-window, 0) }

// shape returns how many parts to inflate a stream of zlen bytes in and how many goroutines to
// unfilter with, given procs processors. From go test -bench Decode/pngread-parts on 4, 8 and
// 16 of the H200 host's cores: as many parts as cores (up to maxParts) and up to four unfilter
// goroutines do best, the unfilters sleeping while the parts run; on 2 cores every parallel
// shape was slower than the serial decode (docs/PERFORMANCE.md).
func shape(zlen, procs int) (parts, unfilters int) {
	if procs < 4 {
		return 1, 1
	}
	return max(min(zlen/minPartBytes, procs, maxParts), 1), min(procs, maxUnfilters)
}

// decodeProcs is the processors a decode may use: a variable for tests.
var decodeProcs = func() int { return runtime.GOMAXPROCS(0) }

// inflateParallel is inflate, with the input cut into len(cs)+1 ranges decoded at once. It
// also returns the output's adler32, hashed in parallel as the output becomes final.
func (d *inflater) inflateParallel(out, in []byte, cs []*part, step int, publish func(int) bool) (n, end int, sum uint32, ok bool) {
	var cancel atomic.Bool
	var workers sync.WaitGroup
	for i, c := range cs {
		c.from, c.to = (i+1)*len(in)/(len(cs)+1)*8, math.MaxInt
		if i+1 < len(cs) {
			c.to = (i + 2) * len(in) / (len(cs) + 1) * 8
		}
		c.done, c.op = make(chan struct{}), -1
		workers.Go(func() { c.run(in, len(out), &cancel) })
	}
	defer workers.Wait()
	defer cancel.Store(true)

	h := newHasher(out)
	defer h.wait()
	// A placed part's last window bytes are written at once, as the next part's window, its
	// others on a goroutine (head): the output is final only up to the first part placed until
	// all are, which holding tells the progress calls.
	holding := false
	var placed []*part
	defer func() {
		for _, c := range placed {
			c.head.Wait()
		}
	}()
	d.br = bitReader{in: in}
	pr := newProgress(step, publish)
	if publish != nil {
		pr.publish = func(n int) bool { return holding || publish(n) }
	}
	op, final, next := 0, false, 0
	for !final {
		until := math.MaxInt
		if next < len(cs) {
			until = cs[next].from
		}
		if op, final, ok = d.blocks(out, op, until, &pr); !ok {
			return 0, 0, 0, false
		}
		h.final(op)
		at := d.br.bitPos()
		for ; !final && next < len(cs) && cs[next].from <= at; next++ {
			c := cs[next]
			<-c.done
			if !c.ok || c.start != at {
				continue // a false start, or none: decode its range here
			}
			if op, ok = c.place(out, op); !ok {
				return 0, 0, 0, false
			}
			placed, holding = append(placed, c), true
			h.add(&c.hash)
			d.br.seek(c.end)
			at, final = c.end, c.final
		}
	}
	holding = false
	for i, c := range placed {
		c.head.Wait()
		upto := op
		if i+1 < len(placed) {
			upto = placed[i+1].op
		}
		if publish != nil && !pr.reached(upto) {
			return 0, 0, 0, false
		}
	}
	if end = d.br.align(); end < 0 || !pr.last(op) {
		return 0, 0, 0, false
	}
	return op, end, h.sum(), true
}

// run looks for the part's first block and decodes from it, trying later candidates when one
// turns out false.
func (c *part) run(in []byte, total int, cancel *atomic.Bool) {
	defer close(c.done)
	c.ok = false
	for p := c.from; p < c.to && !cancel.Load(); p++ {
		if p = findBlock(in, p, c.to); p < 0 {
			return
		}
		if c.decode(in, p, total, cancel) {
			c.start, c.ok = p, true
			return
		}
	}
}

// findBlock returns the first bit in [from, to) of in where a non-final dynamic block could
// start (its counts in range and its code length code complete), or -1.
func findBlock(in []byte, from, to int) int {
	for p := from; p < to && (p+17)>>3+8 <= len(in); p++ {
		v := binary.LittleEndian.Uint64(in[p>>3:]) >> (p & 7)
		if v&7 != 4 || v>>3&31 > 29 || v>>8&31 > 29 { // BFINAL 0, BTYPE 2, HLIT, HDIST
			continue
		}
		npre := int(v>>13&15) + 4
		pre := binary.LittleEndian.Uint64(in[(p+17)>>3:]) >> ((p + 17) & 7)
		kraft := 0
		for i := range npre {
			if l := pre >> (3 * i) & 7; l != 0 {
				kraft += 128 >> l
			}
		}
		if kraft == 128 {
			return p
		}
	}
	return -1
}

// decode decodes from bit p of in, which must start a non-final dynamic block, until a block
// boundary at or past c.to or the final block's end. It fails on anything invalid, on more
// output than total, and when cancelled.
func (c *part) decode(in []byte, p, total int, cancel *atomic.Bool) bool {
	d := &c.inf
	d.br = bitReader{in: in}
	d.br.seek(p)
	final, typ, ok := d.header()
	if !ok || final || typ != 2 || d.lens[256] == 0 {
		return false
	}
	c.nsym, c.nlit = 0, 0
	op := 0                      // symbols so far, then bytes in lit
	inLit := false               // writing lit
	scanned, lastMarker := 0, -1 // sym[:scanned] was looked at for markers
	for {
		if typ == 0 {
			b, ok := d.stored()
			if !ok {
				return false
			}
			if inLit {
				c.lit = slices.Grow(c.lit[:op], len(b))
				op += copy(c.lit[op:cap(c.lit)], b)
			} else {
				c.sym = slices.Grow(c.sym[:op], len(b))[:op+len(b)]
				for i, v := range b {
					c.sym[op+i] = uint16(v)
				}
				op += len(b)
			}
		}
		for st := paused; typ != 0 && st != blockEnd; {
			if cancel.Load() {
				return false
			}
			if inLit {
				c.lit = slices.Grow(c.lit[:op], litPause+300)
				c.lit = c.lit[:cap(c.lit)]
				op, st = codes(d, c.lit, op, op+litPause)
			} else {
				c.sym = slices.Grow(c.sym[:op], symPause+300)
				c.sym = c.sym[:cap(c.sym)]
				op, st = codes(d, c.sym, op, op+symPause)
			}
			if st == failed {
				return false
			}
			if !inLit {
				// Switch to bytes once the last window symbols hold no marker (later output
				// can copy none then). Only the latest marker matters: look back from the end
				// to the symbols looked at before.
				for i := op - 1; i >= max(scanned, op-window); i-- {
					if c.sym[i] > 255 {
						lastMarker = i
						break
					}
				}
				if scanned = op; op-lastMarker > window {
					c.lit = slices.Grow(c.lit[:0], window+litPause+300)[:window]
					for i, v := range c.sym[op-window : op] {
						c.lit[i] = byte(v)
					}
					c.nsym, op, inLit = op, window, true
				}
			}
			if c.nsym+op > total+window {
				return false
			}
		}
		if final || d.br.bitPos() >= c.to {
			break
		}
		if final, typ, ok = d.header(); !ok {
			return false
		}
	}
	if inLit {
		c.nlit = op
	} else {
		c.nsym = op
	}
	c.end, c.final = d.br.bitPos(), final
	return c.size() <= total
}

// place writes the part's output into out at op, where the output before it is final, and
// returns the output's new end. The last window bytes are written before it returns, the rest
// by a goroutine that c.head waits for. It fails where a marker reaches before the stream's
// start or the output does not fit, as the serial decode would.
func (c *part) place(out []byte, op int) (int, bool) {
	if c.size() > len(out)-op {
		return 0, false
	}
	if op < window { // only the output so far is before the part
		for _, v := range c.sym[:c.nsym] {
			if int(v)-255 > op {
				return 0, false
			}
		}
	}
	// Markers are looked up in a table: symbols below 256 stand for themselves.
	for i := range 256 {
		c.win[i] = byte(i)
	}
	for d := 1; d <= min(window, op); d++ {
		c.win[255+d] = out[op-d]
	}
	c.op = op
	dst, sym := out[op:op+c.nsym], c.sym[:c.nsym]
	t := max(c.nsym-window, 0)
	resolve(dst[t:], sym[t:], &c.win)
	if c.nlit > window {
		copy(out[op+c.nsym:], c.lit[window:c.nlit])
	}
	// The head goroutine also hashes the part's output, for the adler32 check.
	c.hash = piece{n: c.size()}
	whole := out[op : op+c.size()]
	c.head.Go(func() {
		resolve(dst[:t], sym[:t], &c.win)
		c.hash.sum = adler32.Checksum(whole)
	})
	return op + c.size(), true
}

// resolve writes the bytes that symbols stand for.
func resolve(dst []byte, sym []uint16, win *[1 << 16]byte) {
	for i, v := range sym[:len(dst)] {
		dst[i] = win[v]
	}
}

// hasher computes the adler32 of out's final prefix in pieces, each on its own goroutine as it
// becomes final, and combines them: the serial checksum would take 1.6 ms for a 1024² RGB
// image's rows.
type hasher struct {
	out    []byte
	upto   int
	pieces []*piece
	wg     sync.WaitGroup
}

type piece struct {
	n   int
	sum uint32
}

func newHasher(out []byte) *hasher { return &hasher{out: out} }

// final notes that out[:n] is final and hashes what is new.
func (h *hasher) final(n int) {
	if n <= h.upto {
		return
	}
	p, b := &piece{n: n - h.upto}, h.out[h.upto:n]
	h.wg.Go(func() { p.sum = adler32.Checksum(b) })
	h.add(p)
}

// add notes the next p.n bytes, which another goroutine hashes into p before sum is called.
func (h *hasher) add(p *piece) {
	h.pieces = append(h.pieces, p)
	h.upto += p.n
}

func (h *hasher) wait() { h.wg.Wait() }

// sum waits for final's pieces and returns the adler32 of out[:upto].
func (h *hasher) sum() uint32 {
	h.wait()
	s := adler32.Checksum(nil)
	for _, p := range h.pieces {
		s = adler.Combine(s, p.sum, p.n)
	}
	return s
}
