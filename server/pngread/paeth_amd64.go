package pngread

import "unsafe"

// paeth3 and paeth4 undo the Paeth filter on a row of RGB or RGBA samples: SSE2, which every
// amd64 CPU has (go test -bench Paeth: 2-3x the Go loops).
func paeth3(cur, prev, src []byte) {
	if n := min(len(cur), len(prev), len(src)) / 3; n > 0 {
		paeth3SSE2(unsafe.SliceData(cur), unsafe.SliceData(prev), unsafe.SliceData(src), n)
	}
}

func paeth4(cur, prev, src []byte) {
	if n := min(len(cur), len(prev), len(src)) / 4; n > 0 {
		paeth4SSE2(unsafe.SliceData(cur), unsafe.SliceData(prev), unsafe.SliceData(src), n)
	}
}

//go:noescape
func paeth3SSE2(cur, prev, src *byte, n int)

//go:noescape
func paeth4SSE2(cur, prev, src *byte, n int)
