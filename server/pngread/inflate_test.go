package pngread

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"mediaqual/fixtures"
)

// Strictness: inflate fails on streams compress/flate decodes only when the output does not
// fit the buffer (by design: pngread passes the exact image size), and zlibStream only on a
// preset dictionary (FDICT), which compress/zlib accepts when the dictionary id is that of the
// empty dictionary. Everything else must match compress/flate: the same output and stream
// end, or a failure where compress/flate fails.

// --- reference -------------------------------------------------------------------------

// flateRef decodes the raw DEFLATE stream at the start of data with compress/flate, reading
// at most limit bytes of output. It returns the output and where the stream ends in data, ok
// whether flate decoded it, and big if the output exceeds limit (nothing is known then).
func flateRef(data []byte, limit int) (out []byte, end int, ok, big bool) {
	r := bytes.NewReader(data) // an io.ByteReader: flate reads no further than the stream
	out, err := io.ReadAll(io.LimitReader(flate.NewReader(r), int64(limit)+1))
	if len(out) > limit {
		return nil, 0, false, true
	}
	return out, len(data) - r.Len(), err == nil, false
}

// agree checks inflate against compress/flate on data: the same output and stream end, a
// failure with one byte less room, or a failure where flate fails. It reports whether flate
// decoded data.
func agree(t testing.TB, d *inflater, data []byte, limit int) bool {
	t.Helper()
	want, wantEnd, ok, big := flateRef(data, limit)
	switch {
	case big:
		return false
	case !ok:
		if n, end, ok := d.inflate(make([]byte, limit), data, 0, nil); ok {
			t.Fatalf("inflate decoded %d bytes (stream end %d) where compress/flate fails", n, end)
		}
		return false
	}
	out := make([]byte, len(want))
	n, end, ok := d.inflate(out, data, 0, nil)
	if !ok || n != len(want) || end != wantEnd || !bytes.Equal(out, want) {
		t.Fatalf("inflate: ok %v, %d bytes, end %d, same bytes %v; compress/flate: %d bytes, end %d",
			ok, n, end, bytes.Equal(out[:n], want), len(want), wantEnd)
	}
	if len(want) > 0 {
		if _, _, ok := d.inflate(out[:len(want)-1], data, 0, nil); ok {
			t.Fatal("inflate decoded into a buffer too small for the output")
		}
	}
	return true
}

func deflateRaw(t testing.TB, in []byte, level, flushEvery int) []byte {
	var buf bytes.Buffer
	w, err := flate.NewWriter(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	for len(in) > 0 {
		n := len(in)
		if flushEvery > 0 {
			n = min(n, flushEvery)
		}
		w.Write(in[:n])
		if in = in[n:]; flushEvery > 0 {
			w.Flush()
		}
	}
	w.Close()
	return buf.Bytes()
}

// --- inputs ----------------------------------------------------------------------------

// inputs returns data of the given size in several styles, keyed by name.
func inputs(n int) map[string][]byte {
	r := rand.New(rand.NewPCG(uint64(n), 3))
	m := map[string][]byte{}
	random := make([]byte, n)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	m["random"] = random

	words := strings.Fields("the quick brown fox jumps over a lazy dog while PNG rows inflate")
	var text []byte
	for len(text) < n {
		text = append(text, words[r.IntN(len(words))]...)
		text = append(text, " \n"[r.IntN(8)/7])
	}
	m["text"] = text[:n]

	// Runs of one byte and repeats of 2-5 byte patterns: overlapping matches (distance 1, 2...).
	var runs []byte
	for len(runs) < n {
		pat := binary.LittleEndian.AppendUint64(nil, r.Uint64())[:1+r.IntN(5)]
		for k := r.IntN(600); k > 0; k-- {
			runs = append(runs, pat...)
		}
		runs = append(runs, byte(r.Uint32()))
	}
	m["runs"] = runs[:n]

	// Filtered rows of a noisy gradient, like the PNG data pngread inflates.
	pixels := make([]byte, n)
	for i := range pixels {
		pixels[i] = byte(i%3*40+i/3%256) + byte(r.IntN(5))
		if i%301 == 0 {
			pixels[i] = 4
		}
	}
	m["pixels"] = pixels

	// Geometrically distributed bytes: Huffman codes up to 15 bits, so literal sub-tables.
	skewed := make([]byte, n)
	for i := range skewed {
		skewed[i] = byte(bits.TrailingZeros64(r.Uint64() | 1<<40))
	}
	m["skewed"] = skewed
	return m
}

var levels = []int{flate.HuffmanOnly, flate.NoCompression, flate.BestSpeed, flate.DefaultCompression, flate.BestCompression}

func TestInflateMatchesFlate(t *testing.T) {
	var d inflater // reused throughout, as pngread reuses pooled inflaters
	for _, n := range []int{0, 1, 2, 257, 258, 1000, 65535, 65536, 65537, 200_003, 1 << 20} {
		for name, in := range inputs(n) {
			if n == 1<<20 && (name == "text" || name == "skewed") {
				continue // time: the other styles cover 1 MB
			}
			for _, level := range levels {
				t.Run(fmt.Sprintf("%s/%d/level%d", name, n, level), func(t *testing.T) {
					if !agree(t, &d, deflateRaw(t, in, level, 0), n) {
						t.Fatal("compress/flate fails on its own stream")
					}
				})
			}
		}
	}
}

// TestInflateManyBlocks flushes every few bytes: many small stored, fixed and dynamic blocks,
// and empty stored blocks from the flushes.
func TestInflateManyBlocks(t *testing.T) {
	var d inflater
	for name, in := range inputs(20_000) {
		for _, level := range levels {
			for _, every := range []int{1, 3, 17, 200, 5000} {
				t.Run(fmt.Sprintf("%s/level%d/every%d", name, level, every), func(t *testing.T) {
					if !agree(t, &d, deflateRaw(t, in, level, every), len(in)) {
						t.Fatal("compress/flate fails on its own stream")
					}
				})
			}
		}
	}
}

// --- hand-built streams ----------------------------------------------------------------

// bitWriter writes DEFLATE streams by hand.
type bitWriter struct {
	out []byte
	acc uint64
	n   uint
}

// bits writes the n <= 32 low bits of v, least significant first.
func (w *bitWriter) bits(v int, n uint) {
	w.acc |= uint64(v) & (1<<n - 1) << w.n
	for w.n += n; w.n >= 8; w.n -= 8 {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
	}
}

func (w *bitWriter) bytes() []byte {
	if w.n > 0 {
		w.bits(0, 8-w.n)
	}
	return w.out
}

// code is a prefix code for writing: code lengths and canonical codes (RFC 1951 3.2.2).
type code struct {
	lens  []uint8
	codes []int
}

func newCode(lens []uint8) code {
	var count, next [16]int
	for _, l := range lens {
		count[l]++
	}
	for l, c := 1, 0; l < 16; l++ {
		c = (c + count[l-1]*min(l-1, 1)) << 1
		next[l] = c
	}
	c := code{lens, make([]int, len(lens))}
	for s, l := range lens {
		if l != 0 {
			c.codes[s] = next[l]
			next[l]++
		}
	}
	return c
}

// sym writes symbol s, its code most significant bit first.
func (w *bitWriter) sym(c code, s int) {
	n := uint(c.lens[s])
	w.bits(int(bits.Reverse32(uint32(c.codes[s]))>>(32-n)), n)
}

var (
	lenBase   = [29]int{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lenExtra  = [29]uint{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase  = [30]int{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra = [30]uint{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

	fixedLit, fixedDist = func() (code, code) {
		lit, dist := make([]uint8, 288), make([]uint8, 32)
		for i := range lit {
			lit[i] = [4]uint8{8, 9, 7, 8}[btoi(i >= 144)+btoi(i >= 256)+btoi(i >= 280)]
		}
		for i := range dist {
			dist[i] = 5
		}
		return newCode(lit), newCode(dist)
	}()
	// A complete precode for all 19 code length symbols.
	prePlain = newCode([]uint8{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5})
)

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// match writes length symbol ls with extra le, then distance symbol ds with extra de.
func (w *bitWriter) match(lit, dist code, ls, le, ds, de int) {
	w.sym(lit, 257+ls)
	w.bits(le, lenExtra[ls])
	w.sym(dist, ds)
	w.bits(de, distExtra[ds])
}

// header writes a block header; for a dynamic block (typ 2), the code lengths as precode
// symbols with their extra bits (pairs), with HLIT and HDIST as given.
func (w *bitWriter) header(final bool, typ, nlit, ndist int, pre code, syms ...int) {
	w.bits(btoi(final), 1)
	w.bits(typ, 2)
	if typ != 2 {
		return
	}
	w.bits(nlit-257, 5)
	w.bits(ndist-1, 5)
	w.bits(19-4, 4)
	for _, s := range codeOrder {
		w.bits(int(pre.lens[s]), 3)
	}
	for i := 0; i < len(syms); i += 2 {
		w.sym(pre, syms[i])
		w.bits(syms[i+1], map[int]uint{16: 2, 17: 3, 18: 7}[syms[i]])
	}
}

// dynamic writes a dynamic block header for the literal/length and distance code lengths.
func (w *bitWriter) dynamic(final bool, lit, dist []uint8) {
	var syms []int
	for _, l := range append(append([]uint8{}, lit...), dist...) {
		syms = append(syms, int(l), 0)
	}
	w.header(final, 2, len(lit), len(dist), prePlain, syms...)
}

// TestInflateFixed decodes a hand-built fixed-code block with every kind of code.
func TestInflateFixed(t *testing.T) {
	var w bitWriter
	w.header(true, 1, 0, 0, code{})
	want := []byte("ab\xff\x8f\x90")
	for _, c := range want {
		w.sym(fixedLit, int(c))
	}
	w.match(fixedLit, fixedDist, 28, 0, 1, 0)  // 258 via code 285, distance 2
	w.match(fixedLit, fixedDist, 27, 31, 0, 0) // 258 via code 284 and 31 extra, distance 1
	w.match(fixedLit, fixedDist, 9, 1, 4, 1)   // 14, distance 6
	w.match(fixedLit, fixedDist, 0, 0, 8, 3)   // 3, distance 20
	w.sym(fixedLit, 256)
	for range 258 {
		want = append(want, want[len(want)-2])
	}
	for range 258 {
		want = append(want, want[len(want)-1])
	}
	for range 14 {
		want = append(want, want[len(want)-6])
	}
	for range 3 {
		want = append(want, want[len(want)-20])
	}
	data := w.bytes()
	got, wantEnd, ok, _ := flateRef(data, 1000)
	if !ok || !bytes.Equal(got, want) || wantEnd != len(data) {
		t.Fatalf("the test's stream is wrong: compress/flate gives %v, %q", ok, got)
	}
	var d inflater
	agree(t, &d, data, 1000)
	agree(t, &d, append(data, 1, 2, 3), 1000) // trailing bytes: not part of the stream
}

// randomLens returns code lengths for n symbols, the used ones forming a random complete code
// of at most 15 bits that is often deep (a single used symbol gets a 1-bit code).
func randomLens(r *rand.Rand, n int, used []int) []uint8 {
	lens := make([]uint8, n)
	if len(used) == 1 {
		lens[used[0]] = 1
	}
	if len(used) < 2 {
		return lens
	}
	depths := []uint8{0}
	for len(depths) < len(used) {
		i := r.IntN(len(depths))
		if r.IntN(3) > 0 {
			i = len(depths) - 1 // the leaf split last: long codes
		}
		if depths[i] < 15 {
			depths[i]++
			depths = append(depths, depths[i])
		}
	}
	r.Shuffle(len(depths), func(i, j int) { depths[i], depths[j] = depths[j], depths[i] })
	for k, s := range used {
		lens[s] = depths[k]
	}
	return lens
}

// randomStream writes blocks with random codes (deep ones included: both tables' sub-tables)
// and random valid content; fixed-code and stored blocks come in between.
func randomStream(r *rand.Rand) []byte {
	var w bitWriter
	hist := 0 // output so far
	nblocks := 1 + r.IntN(3)
	for b := range nblocks {
		final := b == nblocks-1
		lit, dist := fixedLit, fixedDist
		nlit, ndist := 286, 30
		switch r.IntN(5) {
		case 0:
			w.header(final, 1, 0, 0, code{})
		case 1: // stored
			w.header(final, 0, 0, 0, code{})
			w.bytes()
			n := r.IntN(300)
			w.bits(n, 16)
			w.bits(^n, 16)
			for range n {
				w.bits(r.IntN(256), 8)
			}
			hist += n
			continue
		default:
			nlit, ndist = 257+r.IntN(30), 1+r.IntN(30)
			p := r.Float64()
			usedLit, usedDist := []int{256}, []int(nil)
			for s := range nlit {
				if s != 256 && r.Float64() < p {
					usedLit = append(usedLit, s)
				}
			}
			for s := range ndist {
				if r.Float64() < p {
					usedDist = append(usedDist, s)
				}
			}
			lit, dist = newCode(randomLens(r, nlit, usedLit)), newCode(randomLens(r, ndist, usedDist))
			w.dynamic(final, lit.lens, dist.lens)
		}
		for k := r.IntN(3000); k > 0; k-- {
			s := r.IntN(nlit)
			if s == 256 || lit.lens[s] == 0 {
				continue
			}
			if s < 256 {
				w.sym(lit, s)
				hist++
				continue
			}
			ds := r.IntN(ndist)
			if s >= 286 || dist.lens[ds] == 0 || distBase[ds] > hist {
				continue
			}
			ls, le := s-257, r.IntN(1<<lenExtra[s-257])
			de := r.IntN(min(1<<distExtra[ds], hist-distBase[ds]+1))
			w.match(lit, dist, ls, le, ds, de)
			hist += lenBase[ls] + le
		}
		w.sym(lit, 256)
	}
	return w.bytes()
}

func TestInflateRandomCodes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var d inflater
	for i := range 2000 {
		data := randomStream(r)
		if !agree(t, &d, data, 1<<22) {
			t.Fatalf("stream %d: compress/flate fails on it", i)
		}
	}
}

// eob writes a dynamic block of the given code lengths holding just the end-of-block code.
func eob(w *bitWriter, lit, dist []uint8) {
	w.dynamic(true, lit, dist)
	w.sym(newCode(lit), 256)
}

// TestInflateInvalid checks hand-built invalid streams fail, as they do in compress/flate.
func TestInflateInvalid(t *testing.T) {
	lits := func(lens ...uint8) []uint8 { // literal/length code lengths, EOB with 1 bit
		l := make([]uint8, 257)
		l[256] = 1
		copy(l, lens)
		return l
	}
	eight := make([]uint8, 257)
	for i := range eight[:255] {
		eight[i] = 8
	}
	eight[255], eight[256] = 9, 9
	withLength := append(append([]uint8{}, eight...), 0) // and length code 257
	withLength[254], withLength[257] = 9, 9
	cases := map[string]func(w *bitWriter){
		"type3": func(w *bitWriter) { w.header(true, 3, 0, 0, code{}) },
		"distTooFar": func(w *bitWriter) {
			w.header(true, 1, 0, 0, code{})
			w.sym(fixedLit, 'a')
			w.match(fixedLit, fixedDist, 0, 0, 1, 0)
		},
		"distFromEmpty": func(w *bitWriter) {
			w.header(true, 1, 0, 0, code{})
			w.match(fixedLit, fixedDist, 0, 0, 0, 0)
		},
		"lit286": func(w *bitWriter) { w.header(true, 1, 0, 0, code{}); w.sym(fixedLit, 286) },
		"lit287": func(w *bitWriter) { w.header(true, 1, 0, 0, code{}); w.sym(fixedLit, 287) },
		"dist30": func(w *bitWriter) {
			w.header(true, 1, 0, 0, code{})
			w.sym(fixedLit, 'a')
			w.sym(fixedLit, 257)
			w.sym(fixedDist, 30)
		},
		"dist31": func(w *bitWriter) {
			w.header(true, 1, 0, 0, code{})
			w.sym(fixedLit, 'a')
			w.sym(fixedLit, 257)
			w.sym(fixedDist, 31)
		},
		"storedNLEN": func(w *bitWriter) { w.header(true, 0, 0, 0, code{}); w.bytes(); w.bits(5, 16); w.bits(5, 16) },
		"storedShort": func(w *bitWriter) {
			w.header(true, 0, 0, 0, code{})
			w.bytes()
			w.bits(5, 16)
			w.bits(^5, 16)
			w.bits(0, 16)
		},
		"HLIT287": func(w *bitWriter) { w.dynamic(true, append(lits(1), make([]uint8, 30)...), []uint8{1}) },
		"HDIST31": func(w *bitWriter) { w.dynamic(true, lits(1), make([]uint8, 31)) },
		// Each bad code below is followed by a well-formed end of block: the code is the fault.
		"litOver":        func(w *bitWriter) { eob(w, lits(1, 1), []uint8{1}) },
		"litIncomplete":  func(w *bitWriter) { eob(w, lits(2), []uint8{1}) },
		"litOne2Bit":     func(w *bitWriter) { l := lits(); l[256] = 2; eob(w, l, []uint8{1}) },
		"distOver":       func(w *bitWriter) { eob(w, lits(1), []uint8{1, 1, 1}) },
		"distIncomplete": func(w *bitWriter) { eob(w, eight, []uint8{1, 2}) },
		"distUnusedOfOne": func(w *bitWriter) { // the code a single 1-bit distance code leaves
			w.dynamic(true, withLength, []uint8{0, 1})
			c := newCode(withLength)
			w.sym(c, 'x')
			w.sym(c, 'y')
			w.sym(c, 257)
			w.bits(1, 1)
		},
		"noEOB": func(w *bitWriter) { // a single 1-bit code, for literal 0: no end in sight
			l := lits(1)
			l[256] = 0
			w.dynamic(true, l, []uint8{1})
			for range 20 {
				w.bits(0, 1)
			}
		},
		"preOver": func(w *bitWriter) {
			w.header(true, 2, 257, 1, code{lens: []uint8{1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}})
		},
		"preIncomplete": func(w *bitWriter) { // three 2-bit codes: 0, 1 and 18
			pre := newCode([]uint8{2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
			w.header(true, 2, 257, 1, pre, 1, 0, 18, 127, 18, 106, 1, 0, 1, 0)
			w.sym(newCode(lits(1)), 256)
		},
		"repeatFirst":    func(w *bitWriter) { w.header(true, 2, 257, 1, prePlain, 16, 0) },
		"repeatTooLong":  func(w *bitWriter) { w.header(true, 2, 257, 1, prePlain, 18, 127, 18, 127, 17, 7) },
		"repeat16TooFar": func(w *bitWriter) { w.header(true, 2, 257, 1, prePlain, 18, 127, 18, 107, 1, 0, 16, 3) },
		"truncatedHeader": func(w *bitWriter) {
			w.header(true, 2, 257, 1, prePlain, 8, 0)
		},
		"notFinal": func(w *bitWriter) { w.header(false, 1, 0, 0, code{}); w.sym(fixedLit, 256) },
	}
	var d inflater
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			var w bitWriter
			write(&w)
			data := w.bytes()
			if agree(t, &d, data, 1<<16) {
				t.Fatal("compress/flate decodes it: not an invalid stream")
			}
			if _, _, ok := d.inflate(make([]byte, 1<<16), data, 0, nil); ok {
				t.Fatal("inflate decoded it")
			}
		})
	}
	// Valid corner cases: a repeat crossing from literal/length into distance lengths, a
	// single 1-bit distance code, an empty distance code, a block of only EOB.
	for name, write := range map[string]func(w *bitWriter){
		"repeatAcross": func(w *bitWriter) {
			w.header(true, 2, 257, 2, prePlain, 18, 127, 18, 106, 1, 0, 16, 0)
			l := make([]uint8, 257)
			l[255], l[256] = 1, 1
			c := newCode(l)
			w.sym(c, 255)
			w.sym(c, 255)
			w.sym(c, 256)
		},
		"singleDist": func(w *bitWriter) {
			w.dynamic(true, withLength, []uint8{0, 1})
			c, dc := newCode(withLength), newCode([]uint8{0, 1})
			w.sym(c, 'x')
			w.sym(c, 'y')
			w.match(c, dc, 0, 0, 1, 0)
			w.sym(c, 256)
		},
		"emptyDist": func(w *bitWriter) {
			w.dynamic(true, eight, []uint8{0})
			c := newCode(eight)
			w.sym(c, 'x')
			w.sym(c, 256)
		},
		"onlyEOB": func(w *bitWriter) {
			l := make([]uint8, 257)
			l[256] = 1
			w.dynamic(true, l, []uint8{0})
			w.sym(newCode(l), 256)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var w bitWriter
			write(&w)
			if !agree(t, &d, w.bytes(), 1<<16) {
				t.Fatal("compress/flate fails on it")
			}
		})
	}
}

// TestInflateCorrupt truncates and flips bits of small valid streams of every block type.
func TestInflateCorrupt(t *testing.T) {
	var w bitWriter
	w.header(false, 1, 0, 0, code{})
	for _, c := range []byte("fixed fixed") {
		w.sym(fixedLit, int(c))
	}
	w.match(fixedLit, fixedDist, 3, 0, 5, 1)
	w.sym(fixedLit, 256)
	w.header(true, 0, 0, 0, code{})
	w.bytes()
	w.bits(3, 16)
	w.bits(^3, 16)
	w.bits('s'|'t'<<8|'o'<<16, 24)
	text := inputs(600)["text"]
	streams := map[string][]byte{
		"dynamic":     deflateRaw(t, text, 9, 0),
		"huffmanOnly": deflateRaw(t, text[:200], flate.HuffmanOnly, 0),
		"stored":      deflateRaw(t, text[:50], 0, 0),
		"fixedStored": w.bytes(),
		"blocks":      deflateRaw(t, text[:100], 6, 7),
	}
	// Random codes, deep ones included: the first few streams of 150-700 bytes.
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 4; {
		if s := randomStream(r); len(s) >= 150 && len(s) <= 700 {
			streams[fmt.Sprint("random", i)] = s
			i++
		}
	}
	var d inflater
	for name, data := range streams {
		t.Run(name, func(t *testing.T) {
			for n := range len(data) {
				agree(t, &d, data[:n], 1<<16)
			}
			for i := range 8 * len(data) {
				b := bytes.Clone(data)
				b[i/8] ^= 1 << (i % 8)
				agree(t, &d, b, 1<<16)
			}
		})
	}
}

// --- zlib and pipelining ---------------------------------------------------------------

func TestZlibStream(t *testing.T) {
	in := inputs(70_000)["pixels"]
	z := deflate(in)
	var d inflater
	out := make([]byte, len(in))
	if end, ok := d.zlibStream(out, z, nil, 0, nil); !ok || end != len(z) || !bytes.Equal(out, in) {
		t.Fatalf("valid stream: ok %v, end %d of %d", ok, end, len(z))
	}
	if end, ok := d.zlibStream(out, append(bytes.Clone(z), 9, 9), nil, 0, nil); !ok || end != len(z) {
		t.Fatalf("trailing bytes: ok %v, end %d of %d", ok, end, len(z))
	}
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(z)) }
	for name, bad := range map[string][]byte{
		"CM7":      mod(func(b []byte) []byte { b[0] = 0x77; return fixCheck(b) }),
		"CINFO8":   mod(func(b []byte) []byte { b[0] = 0x88; return fixCheck(b) }),
		"FCHECK":   mod(func(b []byte) []byte { b[1]++; return b }),
		"FDICT":    mod(func(b []byte) []byte { b[1] |= 0x20; return fixCheck(b) }),
		"adler":    mod(func(b []byte) []byte { b[len(b)-2] ^= 4; return b }),
		"noAdler":  z[:len(z)-1],
		"short":    z[:1],
		"oneMore":  deflate(append(bytes.Clone(in), 0)),
		"oneLess":  deflate(in[:len(in)-1]),
		"twoParts": append(deflate(in[:100]), deflate(in[100:])...),
	} {
		if _, ok := d.zlibStream(out, bad, nil, 0, nil); ok {
			t.Errorf("%s: zlibStream accepted it", name)
		}
		zr, err := zlib.NewReader(bytes.NewReader(bad))
		if err == nil {
			got, err := io.ReadAll(zr)
			if err == nil && bytes.Equal(got, in) {
				t.Errorf("%s: compress/zlib decodes it: not an invalid stream", name)
			}
		}
	}
	// The documented strictness: compress/zlib ignores a preset dictionary whose id is that
	// of the empty dictionary (adler32 1); zlibStream fails, and pngread falls back.
	dict := append([]byte{z[0], z[1] | 0x20, 0, 0, 0, 1}, z[2:]...)
	dict = fixCheck(dict)
	zr, err := zlib.NewReader(bytes.NewReader(dict))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(zr); err != nil || !bytes.Equal(got, in) {
		t.Fatal("compress/zlib no longer accepts an empty preset dictionary:", err)
	}
	if _, ok := d.zlibStream(out, dict, nil, 0, nil); ok {
		t.Fatal("zlibStream accepted a preset dictionary")
	}
}

// fixCheck sets FCHECK in a zlib header after changes to its other bits.
func fixCheck(b []byte) []byte {
	b[1] &^= 0x1f
	b[1] += byte(31 - (uint(b[0])<<8|uint(b[1]))%31)
	return b
}

// TestInflatePublish checks the progress marks: increasing, at least every step bytes, the
// last one the whole output, and the bytes below a mark never written again (the unfilter
// reads them meanwhile).
func TestInflatePublish(t *testing.T) {
	for name, in := range inputs(300_000) {
		for _, level := range levels {
			for _, nparts := range []int{1, 4} {
				t.Run(fmt.Sprintf("%s/level%d/parts%d", name, level, nparts), func(t *testing.T) {
					var d inflater
					z := zlibAt(t, in, level)
					out := make([]byte, len(in))
					parts := newParts(nparts)
					const step = 4096
					var marks []int
					var sums []uint32
					end, ok := d.zlibStream(out, z, parts, step, func(n int) bool {
						if len(marks) > 0 && n <= marks[len(marks)-1] || n > len(out) {
							t.Fatalf("mark %d after %v", n, marks)
						}
						if !bytes.Equal(out[:n], in[:n]) {
							t.Fatalf("mark %d published before the bytes below it were final", n)
						}
						marks = append(marks, n)
						sums = append(sums, crc32.ChecksumIEEE(out[:n]))
						return true
					})
					if !ok || end != len(z) || !bytes.Equal(out, in) {
						t.Fatal("zlibStream failed")
					}
					if marks[len(marks)-1] != len(out) {
						t.Fatalf("last mark %d, want %d", marks[len(marks)-1], len(out))
					}
					// Once a part is placed, output is published only where a placed part
					// begins and at the end, each part's whole output at once.
					var starts []int
					for _, c := range parts {
						if c.op >= 0 {
							starts = append(starts, c.op)
						}
					}
					prev := 0
					for i, m := range marks {
						switch {
						case len(starts) > 0 && m > starts[0]:
							if m != len(out) && !slices.Contains(starts, m) {
								t.Fatalf("mark %d inside a placed part (parts start at %v)", m, starts)
							}
						case m-prev > step+65535: // a stored block can jump 64 KiB past a mark
							t.Fatalf("marks %d and %d are too far apart", prev, m)
						}
						if crc32.ChecksumIEEE(out[:m]) != sums[i] {
							t.Fatalf("bytes below mark %d changed after it was published", m)
						}
						prev = m
					}
					// Aborting: publish returning false stops zlibStream, which fails.
					calls := 0
					if _, ok := d.zlibStream(out, z, parts, step, func(int) bool { calls++; return calls < 3 }); ok || calls != 3 {
						t.Fatalf("aborted stream: ok %v after %d calls", ok, calls)
					}
				})
			}
		}
	}
}

func zlibAt(t testing.TB, b []byte, level int) []byte {
	var buf bytes.Buffer
	zw, err := zlib.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// TestStreamEnd checks pngread's rule on where the zlib stream may end: exactly at the end
// of an IDAT chunk, with further IDAT chunks of the run ignored, as image/png does.
func TestStreamEnd(t *testing.T) {
	z := deflate(filterRows(samples(40, 30, 3, 4), 3, func(y int) byte { return byte(y % 5) }))
	hdr, end := ihdr(40, 30, 8, 2, 0), chunk("IEND", nil)
	fast(t, file(hdr, chunk("IDAT", z[:100]), chunk("IDAT", z[100:]), chunk("IDAT", []byte("junk")), end))
	fast(t, file(hdr, chunk("IDAT", z), chunk("IDAT", nil), chunk("IDAT", z), end))
	for _, data := range [][]byte{
		file(hdr, chunk("IDAT", z[:100]), chunk("IDAT", append(z[100:], 0)), end),
		file(hdr, chunk("IDAT", append(bytes.Clone(z), z...)), end),
		file(hdr, chunk("IDAT", z[:len(z)-2]), end),
		file(hdr, chunk("IDAT", z[:len(z)-2]), chunk("IDAT", z[len(z)-2:len(z)-1]), end),
	} {
		same(t, data)
	}
}

// --- fuzzing ---------------------------------------------------------------------------

// FuzzInflate compares inflate (mode even) or zlibStream (mode odd) with compress/flate or
// compress/zlib: the same output and stream end, or a failure where they fail; in mode even,
// also the parallel inflate in 2 to 8 parts with the serial one.
func FuzzInflate(f *testing.F) {
	text := inputs(3000)["text"]
	for _, level := range levels {
		f.Add(deflateRaw(f, text[:300], level, 0), uint8(0))
		f.Add(deflateRaw(f, text, level, 100), uint8(0))
		f.Add(zlibAt(f, text[:500], level), uint8(1))
	}
	r := rand.New(rand.NewPCG(3, 3))
	for range 20 {
		f.Add(randomStream(r), uint8(0))
	}
	var w bitWriter
	w.header(true, 1, 0, 0, code{})
	w.sym(fixedLit, 'a')
	w.match(fixedLit, fixedDist, 28, 0, 0, 0)
	w.sym(fixedLit, 256)
	f.Add(w.bytes(), uint8(0))
	const limit = 1 << 18
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		var d inflater
		if mode%2 == 0 {
			agree(t, &d, data, limit)
			agreeParallel(t, data, limit, 2+int(mode/2)%7, "fuzz input")
			return
		}
		r := bytes.NewReader(data)
		var want []byte
		zr, err := zlib.NewReader(r)
		if err == nil {
			want, err = io.ReadAll(io.LimitReader(zr, limit+1))
			if len(want) > limit {
				return
			}
		}
		if err != nil {
			// zlibStream can only succeed with a buffer of the size the DEFLATE part inflates to.
			n := limit
			if len(data) > 2 {
				if k, _, ok := d.inflate(make([]byte, limit), data[2:], 0, nil); ok {
					n = k
				}
			}
			if _, ok := d.zlibStream(make([]byte, n), data, nil, 0, nil); ok {
				t.Fatal("zlibStream decoded a stream compress/zlib rejects")
			}
			return
		}
		out := make([]byte, len(want))
		end, ok := d.zlibStream(out, data, nil, 0, nil)
		if !ok && data[1]&0x20 != 0 {
			return // the documented preset dictionary case
		}
		if !ok || end != len(data)-r.Len() || !bytes.Equal(out, want) {
			t.Fatalf("zlibStream: ok %v, end %d; compress/zlib: %d bytes, end %d", ok, end, len(want), len(data)-r.Len())
		}
	})
}

// --- benchmarks ------------------------------------------------------------------------

// benchStream returns the zlib stream of BenchmarkDecode's fixture and its inflated size.
func benchStream(b *testing.B) ([]byte, int) {
	data, err := fixtures.Image("chelsea.png", 1024, 1024)
	if err != nil {
		b.Fatal(err)
	}
	w, h, ct, idat, ok := scan(data)
	if !ok {
		b.Fatal("fixture does not take the fast path")
	}
	return bytes.Join(idat, nil), h * (1 + w*map[int]int{2: 3, 6: 4}[ct])
}

// BenchmarkInflate compares the fast path's inflate with compress/zlib on the IDAT stream of
// BenchmarkDecode's fixture, adler32 check included, on one goroutine.
func BenchmarkInflate(b *testing.B) {
	z, size := benchStream(b)
	out := make([]byte, size)
	b.Run("compress-flate", func(b *testing.B) {
		b.SetBytes(int64(size))
		zr, err := zlib.NewReader(bytes.NewReader(z))
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := zr.(zlib.Resetter).Reset(bytes.NewReader(z), nil); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(zr, out); err != nil {
				b.Fatal(err)
			}
			if n, err := zr.Read(out[:1]); n != 0 || err != io.EOF {
				b.Fatal("stream does not end with the image:", n, err)
			}
		}
	})
	b.Run("pngread", func(b *testing.B) {
		b.SetBytes(int64(size))
		var d inflater
		for b.Loop() {
			if end, ok := d.zlibStream(out, z, nil, 0, nil); !ok || end != len(z) {
				b.Fatal("inflate failed")
			}
		}
	})
}
