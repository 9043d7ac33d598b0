package encode

// adlerCombine combines the adler32 checksums of consecutive pieces of data (zlib's
// adler32_combine), so that pieces compressed in parallel (the PNG encoder's strips) need no pass
// over the whole: it returns the adler32 of A then B from the adler32 of A, that of B and B's
// length.
func adlerCombine(a, b uint32, lenB int) uint32 {
	const mod = 65521
	rem := uint32(lenB % mod)
	s1 := a & 0xffff
	s2 := rem * s1 % mod
	s1 += b&0xffff + mod - 1
	s2 += a>>16 + b>>16 + mod - rem
	if s1 >= mod {
		s1 -= mod
	}
	if s1 >= mod {
		s1 -= mod
	}
	if s2 >= 2*mod {
		s2 -= 2 * mod
	}
	if s2 >= mod {
		s2 -= mod
	}
	return s1 | s2<<16
}
