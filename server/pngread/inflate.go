package pngread

import (
	"encoding/binary"
	"hash/adler32"
	"math"
	"math/bits"
	"unsafe"
)

// A whole-buffer DEFLATE (RFC 1951) decoder for the fast path: the stream is one []byte and
// the output one []byte of the expected size, which is also the history matches copy from.
// It accepts no stream that compress/flate rejects; it is stricter only in failing on output
// that does not fit and, in zlibStream, on a preset dictionary (see inflate_test.go).

// Decoding table entries (libdeflate style), one uint32 each:
//
//	bit 31      literal, the byte in bits 16-23
//	bits 16-30  length or distance base, precode symbol, or sub-table offset
//	bit 14      invalid: a reserved symbol, or a code an incomplete code leaves unused
//	bit 13      end of block
//	bit 12      sub-table pointer; bits 0-3 are then the sub-table's index bits
//	bits 8-11   code length: the bits before the extra bits
//	bits 0-7    bits to consume: code length plus extra bits
const (
	entLiteral = 1 << 31
	entInvalid = 1 << 14
	entEOB     = 1 << 13
	entSub     = 1 << 12

	// Primary table index bits; longer codes continue in sub-tables.
	litBits  = 11
	distBits = 8
	preBits  = 7 // code length codes have at most 7 bits: no sub-tables

	// Table sizes enough for any code we accept (zlib's examples/enough.c, as in libdeflate:
	// "enough 288 11 15" and "enough 32 8 15").
	litTableLen  = 2342
	distTableLen = 402
)

// Symbol entries less their code length: literal byte, length base and extra bits, distance
// base and extra bits, precode symbol.
var litSyms, distSyms, preSyms = func() (lit [288]uint32, dist [32]uint32, pre [19]uint32) {
	for i := range 256 {
		lit[i] = entLiteral | uint32(i)<<16
	}
	lit[256] = entEOB
	for i, base := 257, 3; i < 285; i++ {
		extra := max(0, (i-261)/4)
		lit[i] = uint32(base)<<16 | uint32(extra)
		base += 1 << extra
	}
	lit[285] = 258 << 16
	lit[286], lit[287] = entInvalid, entInvalid // only the fixed code has them
	for i, base := 0, 1; i < 30; i++ {
		extra := max(0, i/2-1)
		dist[i] = uint32(base)<<16 | uint32(extra)
		base += 1 << extra
	}
	dist[30], dist[31] = entInvalid, entInvalid
	for i := range pre {
		pre[i] = uint32(i) << 16
	}
	return
}()

// codeOrder is the order of the code length code lengths in a dynamic block header.
var codeOrder = [19]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

// build fills table, with tb primary index bits, for the canonical prefix code of the given
// code lengths (0: unused), syms[i] being symbol i's entry less its code length. Like
// compress/flate it rejects over-subscribed codes and incomplete ones other than the empty
// code and a single 1-bit code; their unused codes decode as invalid.
func build(table []uint32, tb int, lens []uint8, syms []uint32) bool {
	var count [16]int
	for _, l := range lens {
		count[l]++
	}
	left := 1 // codes still unassigned at length l
	for l := 1; l <= 15; l++ {
		if left = left<<1 - count[l]; left < 0 {
			return false
		}
	}
	if used := len(lens) - count[0]; left > 0 {
		if used > 1 || used == 1 && count[1] == 0 {
			return false
		}
		for i := range 1 << tb {
			table[i] = entInvalid
		}
	}
	// Symbols sorted by code length, then value: the canonical code order.
	var offs [16]int
	for l := 1; l < 15; l++ {
		offs[l+1] = offs[l] + count[l]
	}
	var sorted [288]uint16
	for s, l := range lens {
		if l != 0 {
			sorted[offs[l]] = uint16(s)
			offs[l]++
		}
	}
	// Codes are read least significant bit first, so a table index is a bit-reversed code;
	// codes longer than tb share a sub-table per tb-bit prefix.
	code, i := 0, 0
	next, sub, subBits, prefix := 1<<tb, 0, 0, -1
	for l := 1; l <= 15; l, code = l+1, code<<1 {
		for k := 0; k < count[l]; k, code, i = k+1, code+1, i+1 {
			rev := int(bits.Reverse16(uint16(code)) >> (16 - l))
			if l <= tb {
				e := syms[sorted[i]] + uint32(l) + uint32(l)<<8
				for j := rev; j < 1<<tb; j += 1 << l {
					table[j] = e
				}
				continue
			}
			if p := rev & (1<<tb - 1); p != prefix {
				// A new sub-table, as large as the codes still to come under this prefix need
				// (zlib's inflate_table): grow it until they fill it.
				prefix, subBits = p, l-tb
				for need := 1<<subBits - (count[l] - k); need > 0 && tb+subBits < 15; {
					subBits++
					need = need<<1 - count[tb+subBits]
				}
				if sub, next = next, next+1<<subBits; next > len(table) {
					return false
				}
				table[p] = entSub | uint32(sub)<<16 | uint32(subBits)
			}
			e := syms[sorted[i]] + uint32(l-tb) + uint32(l-tb)<<8
			for j := rev >> tb; j < 1<<subBits; j += 1 << (l - tb) {
				table[sub+j] = e
			}
		}
	}
	return true
}

// bitReader reads in least significant bit first, 64 bits at a time. Past the end of in it
// reads zeros and pos runs on: align (at stored blocks and the end) tells whether any were
// consumed, and block headers check so that decoding zeros cannot go on forever.
type bitReader struct {
	in  []byte
	pos int    // next byte of in to load
	buf uint64 // unconsumed bits in the low n bits; above them, possibly bits of in[pos:]
	n   uint
}

// refill tops the buffer up to at least 56 bits.
func (br *bitReader) refill() {
	if br.pos <= len(br.in)-8 {
		br.buf |= binary.LittleEndian.Uint64(br.in[br.pos:]) << br.n
		br.pos += int(63-br.n) >> 3
		br.n |= 56
		return
	}
	for ; br.n <= 56; br.n += 8 {
		if br.pos < len(br.in) {
			br.buf |= uint64(br.in[br.pos]) << br.n
		}
		br.pos++
	}
}

// bits consumes and returns the next n <= 32 bits.
func (br *bitReader) bits(n uint) uint32 {
	if br.n < n {
		br.refill()
	}
	v := uint32(br.buf & (1<<n - 1))
	br.buf >>= n
	br.n -= n
	return v
}

// bitPos is the position of the next unconsumed bit in in.
func (br *bitReader) bitPos() int { return br.pos*8 - int(br.n) }

// seek moves the reader to bit p of in.
func (br *bitReader) seek(p int) {
	*br = bitReader{in: br.in, pos: p >> 3}
	br.refill()
	br.buf >>= p & 7
	br.n -= uint(p & 7)
}

// align drops the bits up to the next byte boundary and returns the position in in that
// follows, or -1 if the stream has run past the end of in.
func (br *bitReader) align() int {
	p := br.pos - int(br.n>>3)
	*br = bitReader{in: br.in, pos: p}
	if p > len(br.in) {
		return -1
	}
	return p
}

// inflater holds the decoding tables, reused from block to block and stream to stream.
type inflater struct {
	br    bitReader
	lit   [litTableLen]uint32
	dist  [distTableLen]uint32
	pre   [1 << preBits]uint32
	lens  [286 + 30]uint8
	fixed bool // lit and dist hold the fixed code
}

// zlibStream decompresses the zlib stream (RFC 1950) at the start of z into out, which it
// must fill exactly, and returns where the stream ends in z. With parts, it decodes in
// parallel (inflateParallel), else serially. If publish is not nil, it calls publish(n) every
// step or so bytes, and at the end, once out[:n] is final (publish returning false aborts); it
// verifies the adler32 trailer after the last call. It fails on a preset dictionary.
func (d *inflater) zlibStream(out, z []byte, parts []*part, step int, publish func(int) bool) (end int, ok bool) {
	if len(z) < 2 || z[0]&0x0f != 8 || z[0]>>4 > 7 || (uint(z[0])<<8|uint(z[1]))%31 != 0 || z[1]&0x20 != 0 {
		return 0, false
	}
	var n int
	var sum uint32
	if len(parts) > 0 {
		n, end, sum, ok = d.inflateParallel(out, z[2:], parts, step, publish)
	} else if n, end, ok = d.inflate(out, z[2:], step, publish); ok {
		sum = adler32.Checksum(out)
	}
	if end += 2; !ok || n != len(out) || len(z)-end < 4 || binary.BigEndian.Uint32(z[end:]) != sum {
		return 0, false
	}
	return end + 4, true
}

// inflate decodes the raw DEFLATE stream at the start of in into out. It returns the size of
// the output and where the stream ends in in, or fails on an invalid stream, one that runs
// past the end of in or one whose output does not fit in out. step and publish are as for
// zlibStream.
func (d *inflater) inflate(out, in []byte, step int, publish func(int) bool) (n, end int, ok bool) {
	d.br = bitReader{in: in}
	pr := newProgress(step, publish)
	op, final, ok := d.blocks(out, 0, math.MaxInt, &pr)
	if !ok || !final {
		return 0, 0, false
	}
	if end = d.br.align(); end < 0 || !pr.last(op) {
		return 0, 0, false
	}
	return op, end, true
}

// progress calls publish every step or so bytes of final output.
type progress struct {
	step, mark int
	publish    func(int) bool
}

func newProgress(step int, publish func(int) bool) progress {
	if publish == nil {
		return progress{mark: math.MaxInt}
	}
	step = max(step, 1) // else codes would pause without progress
	return progress{step: step, mark: step, publish: publish}
}

// reached publishes op, the output final so far, and sets the next mark.
func (p *progress) reached(op int) bool {
	p.mark = op + p.step
	return p.publish(op)
}

// last publishes the whole output unless that was the last call.
func (p *progress) last(op int) bool {
	return p.publish == nil || op <= p.mark-p.step || p.reached(op)
}

// blocks decodes blocks into out from op, until the end of the final block or, at a block
// boundary, until the reader has reached bit until of its input. It returns the output so far
// and whether the final block was decoded.
func (d *inflater) blocks(out []byte, op, until int, pr *progress) (n int, final, ok bool) {
	for !final {
		if d.br.bitPos() >= until {
			return op, false, true
		}
		var typ uint64
		if final, typ, ok = d.header(); !ok {
			return 0, false, false
		}
		if typ == 0 {
			b, ok := d.stored()
			if !ok || len(b) > len(out)-op {
				return 0, false, false
			}
			op += copy(out[op:], b)
			if op >= pr.mark && !pr.reached(op) {
				return 0, false, false
			}
			continue
		}
		for {
			var st status
			if op, st = codes(d, out, op, pr.mark); st == failed {
				return 0, false, false
			} else if st == blockEnd {
				break
			}
			if !pr.reached(op) { // paused at the mark
				return 0, false, false
			}
		}
	}
	return op, true, true
}

// header reads a block header and loads the block's code: typ 0 is a stored block, whose
// bytes stored reads.
func (d *inflater) header() (final bool, typ uint64, ok bool) {
	br := &d.br
	if br.refill(); br.pos-len(br.in) > int(br.n>>3) { // already past the end
		return false, 0, false
	}
	final = br.buf&1 != 0
	typ = br.buf >> 1 & 3
	br.buf >>= 3
	br.n -= 3
	switch typ {
	case 1:
		d.fixedTables()
	case 2:
		ok = d.dynamicTables()
		return final, typ, ok
	case 3:
		return false, 0, false
	}
	return final, typ, true
}

// stored returns a stored block's bytes, from the input, and moves the reader past them.
func (d *inflater) stored() ([]byte, bool) {
	br := &d.br
	p := br.align()
	if p < 0 || len(br.in)-p < 4 {
		return nil, false
	}
	size := int(binary.LittleEndian.Uint16(br.in[p:]))
	if uint16(size) != ^binary.LittleEndian.Uint16(br.in[p+2:]) || size > len(br.in)-p-4 {
		return nil, false
	}
	br.pos = p + 4 + size
	return br.in[p+4 : br.pos], true
}

// fixedTables loads the fixed code (RFC 1951 3.2.6), unless the last block left it there.
func (d *inflater) fixedTables() {
	if d.fixed {
		return
	}
	var lens [288 + 32]uint8
	for i := range lens {
		switch {
		case i < 144, i >= 280 && i < 288:
			lens[i] = 8
		case i < 256:
			lens[i] = 9
		case i < 280:
			lens[i] = 7
		default: // distance codes
			lens[i] = 5
		}
	}
	build(d.lit[:], litBits, lens[:288], litSyms[:])
	build(d.dist[:], distBits, lens[288:], distSyms[:])
	d.fixed = true
}

// dynamicTables reads a dynamic block's code lengths and builds its tables.
func (d *inflater) dynamicTables() bool {
	d.fixed = false
	br := &d.br
	nlit, ndist, npre := int(br.bits(5))+257, int(br.bits(5))+1, int(br.bits(4))+4
	if nlit > 286 || ndist > 30 {
		return false
	}
	var preLens [19]uint8
	for _, s := range codeOrder[:npre] {
		preLens[s] = uint8(br.bits(3))
	}
	if !build(d.pre[:], preBits, preLens[:], preSyms[:]) {
		return false
	}
	lens := d.lens[:nlit+ndist]
	for i := 0; i < len(lens); {
		if br.n < preBits+7 {
			br.refill()
		}
		e := d.pre[br.buf&(1<<preBits-1)]
		if e&entInvalid != 0 {
			return false
		}
		br.buf >>= e & 15
		br.n -= uint(e & 15)
		rep, v := 1, uint8(e>>16)
		switch v {
		case 16: // the previous length (which may be a literal/length one) 3-6 times
			if i == 0 {
				return false
			}
			rep, v = 3+int(br.bits(2)), lens[i-1]
		case 17:
			rep, v = 3+int(br.bits(3)), 0
		case 18:
			rep, v = 11+int(br.bits(7)), 0
		}
		if rep > len(lens)-i {
			return false
		}
		for end := i + rep; i < end; i++ {
			lens[i] = v
		}
	}
	return build(d.lit[:], litBits, lens[:nlit], litSyms[:]) &&
		build(d.dist[:], distBits, lens[nlit:], distSyms[:])
}

// status says why codes returned.
type status int

const (
	failed   status = iota
	paused          // op reached stop
	blockEnd        // decoded the end-of-block code
)

// codes decodes a Huffman block's codes into out from op, until the end of the block or until
// op reaches stop. This is the hot loop, with the bit reader in locals. With T uint16 it
// decodes a part of a parallel inflate (see part): a match may then reach up to window
// symbols before out, which it writes as markers.
func codes[T byte | uint16](d *inflater, out []T, op, stop int) (int, status) {
	size := int(unsafe.Sizeof(T(0))) // fixed for each instantiation
	reach := 0                       // how far before out a match may reach
	if size == 2 {
		reach = window
	}
	// out as bytes, for copying matches a word at a time
	ob := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(out)*size)
	in, pos, buf, nb := d.br.in, d.br.pos, d.br.buf, d.br.n
	lit, dist := &d.lit, &d.dist
	st := failed
	length, dst := 0, 0 // a match to copy
	for {
		// 48 bits cover a length code with its extra bits (15+5) and a distance code with its
		// extra bits (15+13).
		if nb < 48 {
			if pos <= len(in)-8 {
				buf |= binary.LittleEndian.Uint64(in[pos:]) << nb
				pos += int(63-nb) >> 3
				nb |= 56
			} else {
				d.br = bitReader{in, pos, buf, nb}
				d.br.refill()
				pos, buf, nb = d.br.pos, d.br.buf, d.br.n
			}
		}
		// Look the next code up before copying the last match, so that the copy's branches
		// do not hold up the load.
		e := lit[buf&(1<<litBits-1)]
		if length != 0 {
			end, from := op+length, op-dst
			switch {
			case from < 0: // into the window before a part: markers
				for ; op < end; op, from = op+1, from+1 {
					if from < 0 {
						out[op] = T(255 - from)
					} else {
						out[op] = out[from]
					}
				}
			case dst*size >= 8 && (len(out)-end)*size >= 8:
				// Most matches are short: copy words, writing up to 7 bytes past end, which
				// later output overwrites. Each word read lies below op, so is final.
				for f, o, e := from*size, op*size, end*size; o < e; f, o = f+8, o+8 {
					binary.LittleEndian.PutUint64(ob[o:], binary.LittleEndian.Uint64(ob[f:]))
				}
			case dst >= length:
				copy(out[op:end], out[from:])
			default:
				// Overlapping: the output repeats with period dst, so copying from the match's
				// start doubles what each copy can take.
				for o := op; o < end; {
					o += copy(out[o:end], out[from:o])
				}
			}
			op, length = end, 0
		}
		if op >= stop {
			st = paused
			break
		}
		if e&entSub != 0 {
			buf >>= litBits
			nb -= litBits
			e = lit[e>>16+uint32(buf)&(1<<(e&15)-1)]
		}
		if int32(e) < 0 { // literal
			if op >= len(out) {
				break
			}
			out[op] = T(byte(e >> 16))
			op++
			buf >>= e & 63
			nb -= uint(e & 63)
			continue
		}
		if e&(entEOB|entInvalid) != 0 {
			if e&entEOB != 0 {
				buf >>= e & 63
				nb -= uint(e & 63)
				st = blockEnd
			}
			break
		}
		length = int(e>>16) + int(buf&(1<<(e&63)-1)>>(e>>8&15))
		buf >>= e & 63
		nb -= uint(e & 63)

		e = dist[buf&(1<<distBits-1)]
		if e&entSub != 0 {
			buf >>= distBits
			nb -= distBits
			e = dist[e>>16+uint32(buf)&(1<<(e&15)-1)]
		}
		dst = int(e>>16) + int(buf&(1<<(e&63)-1)>>(e>>8&15))
		buf >>= e & 63
		nb -= uint(e & 63)
		if e&entInvalid != 0 || dst > op+reach || length > len(out)-op {
			break
		}
	}
	d.br.pos, d.br.buf, d.br.n = pos, buf, nb
	return op, st
}
