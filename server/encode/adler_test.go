package encode

import (
	"bytes"
	"hash/adler32"
	"math/rand/v2"
	"testing"
)

// TestAdlerCombine holds adlerCombine to the checksum of the whole: random pieces, pieces of 0xff (the
// largest sums), empty ones, and lengths past the modulus.
func TestAdlerCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 300 {
		a, b := make([]byte, r.IntN(200000)), make([]byte, r.IntN(200000))
		if i%10 == 0 {
			a = a[:0]
		}
		if i%10 == 1 {
			b = b[:0]
		}
		for j := range a {
			a[j] = byte(r.Uint32())
		}
		for j := range b {
			b[j] = 0xff
		}
		want := adler32.Checksum(append(bytes.Clone(a), b...))
		if got := adlerCombine(adler32.Checksum(a), adler32.Checksum(b), len(b)); got != want {
			t.Fatalf("combine of %d and %d bytes: %08x, want %08x", len(a), len(b), got, want)
		}
	}
}
