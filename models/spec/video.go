package spec

import (
	"encoding/binary"
	"fmt"
	"image"
)

// Video is a Task's pixels as packed rgb24: N frames of W×H, rows top to bottom, 3 bytes a
// pixel, frame after frame. It is the layout workers write and ffmpeg reads, so frames go
// from the worker to the encoder without a format change.
type Video struct {
	W, H, N int
	Pix     []byte
}

// FrameBytes is the size of one frame.
func (v Video) FrameBytes() int { return 3 * v.W * v.H }

// Frame returns frame i's bytes (shared, not copied).
func (v Video) Frame(i int) []byte { n := v.FrameBytes(); return v.Pix[i*n : (i+1)*n] }

// Check reports whether Pix holds exactly N frames of W×H.
func (v Video) Check() error {
	if v.W <= 0 || v.H <= 0 || v.N <= 0 {
		return fmt.Errorf("video of %d frames of %dx%d", v.N, v.W, v.H)
	}
	if want := v.N * v.FrameBytes(); len(v.Pix) != want {
		return fmt.Errorf("video of %d frames of %dx%d needs %d rgb24 bytes, has %d", v.N, v.W, v.H, want, len(v.Pix))
	}
	return nil
}

// RGBA returns frame i as an image (a copy with opaque alpha).
func (v Video) RGBA(i int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, v.W, v.H))
	ExpandRGB(img.Pix, v.Frame(i))
	return img
}

// ExpandRGB writes rgb24 src into dst as RGBA with opaque alpha; dst holds 4/3 of len(src).
func ExpandRGB(dst, src []byte) {
	for s, d := 0, 0; s+2 < len(src); s, d = s+3, d+4 {
		dst[d], dst[d+1], dst[d+2], dst[d+3] = src[s], src[s+1], src[s+2], 0xff
	}
}

// PackRGB writes RGBA src into dst as rgb24, dropping alpha; dst holds 3/4 of len(src). Four
// pixels at a time, as whole words: 2.5x the byte loop (BenchmarkPackRGB), and an edit's
// 1024² RGBA reference is packed on its critical path (server/worker's hand-over).
func PackRGB(dst, src []byte) {
	n, i := len(src)/4, 0
	for ; i+4 <= n; i += 4 {
		s, d := src[4*i:4*i+16:4*i+16], dst[3*i:3*i+12:3*i+12]
		lo, hi := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:])
		binary.LittleEndian.PutUint64(d, lo&0xffffff|lo>>8&0xffffff000000|hi<<48)
		binary.LittleEndian.PutUint32(d[8:], uint32(hi>>16)&0xff|uint32(hi>>24)&0xffffff00)
	}
	for ; i < n; i++ {
		dst[3*i], dst[3*i+1], dst[3*i+2] = src[4*i], src[4*i+1], src[4*i+2]
	}
}

// PackRGBA packs frames of one size into a Video, dropping alpha.
func PackRGBA(frames []*image.RGBA) (Video, error) {
	if len(frames) == 0 || frames[0] == nil {
		return Video{}, fmt.Errorf("no frames")
	}
	r := frames[0].Rect
	v := Video{W: r.Dx(), H: r.Dy(), N: len(frames)}
	v.Pix = make([]byte, v.N*v.FrameBytes())
	for i, f := range frames {
		if f == nil || f.Rect != r {
			got := "nil"
			if f != nil {
				got = f.Rect.String()
			}
			return Video{}, fmt.Errorf("frame %d is %s, frame 0 is %s", i, got, r)
		}
		dst := v.Frame(i)
		for y := 0; y < v.H; y++ {
			PackRGB(dst[3*v.W*y:], f.Pix[y*f.Stride:y*f.Stride+4*v.W])
		}
	}
	return v, nil
}
