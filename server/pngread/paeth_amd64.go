package pngread

// paeth3 and paeth4 undo the Paeth filter on a row of RGB or RGBA samples from byte from (a
// pixel boundary) on: SSE2, which every amd64 CPU has (go test -bench Paeth: 2-3x the Go
// loops).
func paeth3(cur, prev, src []byte, from int) {
	if n := (min(len(cur), len(prev), len(src)) - from) / 3; n > 0 {
		paeth3SSE2(&cur[from], &prev[from], &src[from], n, from)
	}
}

func paeth4(cur, prev, src []byte, from int) {
	if n := (min(len(cur), len(prev), len(src)) - from) / 4; n > 0 {
		paeth4SSE2(&cur[from], &prev[from], &src[from], n, from)
	}
}

// The kernels start at the given pixels; unless left is 0, the pixels before them (in cur and
// prev) are the first pixel's left and up-left neighbours.
//
//go:noescape
func paeth3SSE2(cur, prev, src *byte, n, left int)

//go:noescape
func paeth4SSE2(cur, prev, src *byte, n, left int)
