package pngread

// paeth3Go and paeth4Go are unfilter's Paeth cases (nearly every row of a photo) in Go, for 3
// and 4 bytes a pixel, with the channels interleaved so that the CPU works on three or four
// independent chains at once: paeth3 and paeth4 on CPUs without an assembly version, and
// their reference in tests. They unfilter the row's bytes from from (a pixel boundary) on: a
// span of a row whose left part is already decoded in cur, as the parallel unfilter does.
func paeth3Go(cur, prev, src []byte, from int) {
	var a0, a1, a2, c0, c1, c2 int
	if from >= 3 {
		a0, a1, a2 = int(cur[from-3]), int(cur[from-2]), int(cur[from-1])
		c0, c1, c2 = int(prev[from-3]), int(prev[from-2]), int(prev[from-1])
	}
	for k := from; k+3 <= len(cur) && k+3 <= len(prev) && k+3 <= len(src); k += 3 {
		s, u := src[k:k+3:k+3], prev[k:k+3:k+3]
		b0, b1, b2 := int(u[0]), int(u[1]), int(u[2])
		a0 = (int(s[0]) + paeth(a0, b0, c0)) & 0xff
		a1 = (int(s[1]) + paeth(a1, b1, c1)) & 0xff
		a2 = (int(s[2]) + paeth(a2, b2, c2)) & 0xff
		d := cur[k : k+3 : k+3]
		d[0], d[1], d[2] = byte(a0), byte(a1), byte(a2)
		c0, c1, c2 = b0, b1, b2
	}
}

func paeth4Go(cur, prev, src []byte, from int) {
	var a0, a1, a2, a3, c0, c1, c2, c3 int
	if from >= 4 {
		a0, a1, a2, a3 = int(cur[from-4]), int(cur[from-3]), int(cur[from-2]), int(cur[from-1])
		c0, c1, c2, c3 = int(prev[from-4]), int(prev[from-3]), int(prev[from-2]), int(prev[from-1])
	}
	for k := from; k+4 <= len(cur) && k+4 <= len(prev) && k+4 <= len(src); k += 4 {
		s, u := src[k:k+4:k+4], prev[k:k+4:k+4]
		b0, b1, b2, b3 := int(u[0]), int(u[1]), int(u[2]), int(u[3])
		a0 = (int(s[0]) + paeth(a0, b0, c0)) & 0xff
		a1 = (int(s[1]) + paeth(a1, b1, c1)) & 0xff
		a2 = (int(s[2]) + paeth(a2, b2, c2)) & 0xff
		a3 = (int(s[3]) + paeth(a3, b3, c3)) & 0xff
		d := cur[k : k+4 : k+4]
		d[0], d[1], d[2], d[3] = byte(a0), byte(a1), byte(a2), byte(a3)
		c0, c1, c2, c3 = b0, b1, b2, b3
	}
}

// paeth is the PNG Paeth predictor of a (left), b (up) and c (up-left), with the spec's
// tie-breaking (a, then b, then c). Written so that it inlines and compiles to conditional
// moves only: on photos the choice is unpredictable and branches would mispredict.
func paeth(a, b, c int) int {
	pa, pb := b-c, a-c
	pc := pa + pb
	if pa < 0 {
		pa = -pa
	}
	if pb < 0 {
		pb = -pb
	}
	if pc < 0 {
		pc = -pc
	}
	if pb < pa {
		a, pa = b, pb
	}
	if pc < pa {
		a = c
	}
	return a
}
