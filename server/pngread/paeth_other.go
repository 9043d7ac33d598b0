//go:build !amd64

package pngread

func paeth3(cur, prev, src []byte, from int) { paeth3Go(cur, prev, src, from) }

func paeth4(cur, prev, src []byte, from int) { paeth4Go(cur, prev, src, from) }
