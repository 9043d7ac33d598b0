package pngread

import "unsafe"

// paeth3 and paeth4 undo the Paeth filter on a row, RGB or RGBA samples into RGBA: SSE2,
// which every amd64 CPU has (go test -bench Paeth: about 4x the Go loops).
func paeth3(cur, prev, src []byte) {
	if n := min(len(cur)/4, len(prev)/4, len(src)/3); n > 0 {
		paeth3SSE2(unsafe.SliceData(cur), unsafe.SliceData(prev), unsafe.SliceData(src), n)
	}
}

func paeth4(cur, prev, src []byte) {
	if n := min(len(cur)/4, len(prev)/4, len(src)/4); n > 0 {
		paeth4SSE2(unsafe.SliceData(cur), unsafe.SliceData(prev), unsafe.SliceData(src), n)
	}
}

//go:noescape
func paeth3SSE2(cur, prev, src *byte, n int)

//go:noescape
func paeth4SSE2(cur, prev, src *byte, n int)
