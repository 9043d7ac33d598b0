//go:build !amd64

package pngread

func paeth3(cur, prev, src []byte) { paeth3Go(cur, prev, src) }

func paeth4(cur, prev, src []byte) { paeth4Go(cur, prev, src) }
