package encode_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/server/encode"
)

// benchShapes are the pinned clips of the video rows; -short keeps the first only.
var benchShapes = []struct {
	name     string
	n, w, h  int
	fps      int
	onlyLong bool
}{
	{"wan2.1-17x832x480", 17, 832, 480, 16, false},
	{"wan2.2-121x1280x704", 121, 1280, 704, 24, true},
	{"minimax-h3-124x1344x768", 124, 1344, 768, 24, true},
}

// BenchmarkMP4 times the encoder on the pinned clip shapes for each x264 preset and thread
// count in ENCODE_PRESETS / ENCODE_THREADS (comma-separated; default: the shipped
// configuration), and reports the artifact's size and its PSNR against the raw frames. The
// content is synthetic: "noise" (what L0-random weights give; x264's worst case) and
// "smooth" (moving gradients, closer to real footage). docs/PERFORMANCE.md, "Encode".
//
//	go test -run '^$' -bench MP4 -benchtime 3x ./server/encode/
func BenchmarkMP4(b *testing.B) {
	presets := listEnv("ENCODE_PRESETS", encode.X264.Preset)
	threads := listEnv("ENCODE_THREADS", fmt.Sprint(encode.X264.Threads))
	shapes := benchShapes
	saved := encode.X264
	defer func() { encode.X264 = saved }()
	for _, sh := range shapes {
		if sh.onlyLong && testing.Short() {
			continue
		}
		for _, content := range []string{"noise", "smooth"} {
			v := synthetic(content, sh.n, sh.w, sh.h)
			for _, p := range presets {
				for _, t := range threads {
					b.Run(fmt.Sprintf("%s/%s/%s-t%s", sh.name, content, p, t), func(b *testing.B) {
						encode.X264.Preset = p
						fmt.Sscan(t, &encode.X264.Threads)
						path := filepath.Join(b.TempDir(), "clip.mp4")
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							if err := encodeClip(b, path, v, sh.fps); err != nil {
								b.Fatal(err)
							}
						}
						b.StopTimer()
						st, err := os.Stat(path)
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(float64(st.Size()), "bytes")
						b.ReportMetric(clipPSNR(b, path, v), "psnr-dB")
					})
				}
			}
		}
	}
}

// encodeClip is one clip as the server encodes it: with ENCODE_PRESTART=1 the encoder is
// started off the clock, as a lane starts it beside the Task, and only the encode is timed.
func encodeClip(b *testing.B, path string, v spec.Video, fps int) error {
	if os.Getenv("ENCODE_PRESTART") != "1" {
		return encode.MP4(context.Background(), path, v, fps)
	}
	b.StopTimer()
	e, err := encode.StartMP4(context.Background(), path, v.W, v.H, fps)
	time.Sleep(100 * time.Millisecond) // ffmpeg loads while "the Task" runs
	b.StartTimer()
	if err != nil {
		return err
	}
	return e.Encode(v)
}

func listEnv(key, def string) []string {
	if v := os.Getenv(key); v != "" {
		return strings.Split(v, ",")
	}
	return []string{def}
}

// synthetic makes n frames of w×h: seeded noise around mid-grey, or gradients that move.
func synthetic(kind string, n, w, h int) spec.Video {
	v := spec.Video{W: w, H: h, N: n, Pix: make([]byte, n*w*h*3)}
	r := rand.New(rand.NewPCG(1, 2))
	for f := 0; f < n; f++ {
		px := v.Frame(f)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				i := 3 * (y*w + x)
				if kind == "noise" {
					for c := 0; c < 3; c++ {
						px[i+c] = byte(min(255, max(0, 128+r.NormFloat64()*40)))
					}
					continue
				}
				px[i] = byte((x + 3*f) * 255 / w)
				px[i+1] = byte((y + 2*f) * 255 / h)
				px[i+2] = byte(128 + 100*math.Sin(float64(x+y+4*f)/40))
			}
		}
	}
	return v
}

// clipPSNR decodes the clip and compares it with the raw frames over the whole clip.
func clipPSNR(b *testing.B, path string, v spec.Video) float64 {
	frames, err := media.DecodeFrames(context.Background(), path)
	if err != nil || len(frames) != v.N {
		b.Fatalf("decoding %s: %d frames, %v", path, len(frames), err)
	}
	var mse float64
	for i, f := range frames {
		p, err := media.PSNR(f, v.RGBA(i))
		if err != nil {
			b.Fatal(err)
		}
		if !math.IsInf(p, 1) {
			mse += 255 * 255 / math.Pow(10, p/10) / float64(v.N)
		}
	}
	if mse == 0 {
		return 100
	}
	return 10 * math.Log10(255*255/mse)
}

// BenchmarkStreamedMP4 times what streaming frames into the encoder saves: from the last
// frame being available (the Task returning) to the MP4 on disk. Every variant starts the
// encoder before its frames exist, as a lane does. "unstreamed" then gets the whole clip at
// once; the streamed ones were given all but the last 4 frames (Wan's last VAE chunk) off the clock,
// in Wan's chunks (1 frame, then 4 a chunk), with time to drain between them as a decode gives
// it: in all twice the time one unstreamed encode of the whole clip took (measured once, off
// the clock; ENCODE_DRAIN_MS sets it), so x264 has caught up when the clock starts, as it
// has on the GPU host, where the VAE decode takes many times the encode. The clock covers
// what the server waits for after the Task: the encoder and the frames digest. Every variant
// writes the same bytes and digest. The wan2.2 shape is skipped with -short. docs/PERFORMANCE.md, "Encode".
//
//	go test -run '^$' -bench StreamedMP4 -benchtime 5x ./server/encode/
func BenchmarkStreamedMP4(b *testing.B) {
	ctx := context.Background()
	for _, sh := range benchShapes {
		if sh.onlyLong && testing.Short() {
			continue
		}
		for _, content := range []string{"noise", "smooth"} {
			v := synthetic(content, sh.n, sh.w, sh.h)
			dir := b.TempDir()
			want := filepath.Join(dir, "want.mp4")
			began := time.Now()
			if err := encode.MP4(ctx, want, v, sh.fps); err != nil {
				b.Fatal(err)
			}
			drain := 2 * time.Since(began)
			if ms := os.Getenv("ENCODE_DRAIN_MS"); ms != "" {
				d, err := time.ParseDuration(ms + "ms")
				if err != nil {
					b.Fatalf("ENCODE_DRAIN_MS=%q: %v", ms, err)
				}
				drain = d
			}
			wantBytes, err := os.ReadFile(want)
			if err != nil {
				b.Fatal(err)
			}
			var chunks [][]byte // Wan's decode: 1 frame, then 4 a chunk; the last 4 come with the result
			for n, size := 0, 1; n < v.N-4; n, size = n+size, 4 {
				chunks = append(chunks, v.Pix[n*v.FrameBytes():min(n+size, v.N-4)*v.FrameBytes()])
			}
			// unstreamed: the whole clip given at the end; streamed: all but the last chunk
			// given while "the Task" runs, the encoder digesting them as it feeds ffmpeg;
			// streamed-digest-after: streamed, but the whole clip digested once the Task
			// returned, beside the encoder (how the server did it before).
			for _, variant := range []string{"unstreamed", "streamed", "streamed-digest-after"} {
				streamed := variant != "unstreamed"
				b.Run(sh.name+"/"+content+"/"+variant, func(b *testing.B) {
					path := filepath.Join(b.TempDir(), "clip.mp4")
					digest := encode.FramesSHA256(v)
					b.StopTimer()
					for i := 0; i < b.N; i++ {
						e, err := encode.StartMP4(ctx, path, v.W, v.H, sh.fps)
						if err != nil {
							b.Fatal(err)
						}
						if streamed {
							for _, c := range chunks {
								e.Stream(c)
								time.Sleep(drain / time.Duration(len(chunks)))
							}
						} else {
							time.Sleep(100 * time.Millisecond) // ffmpeg loads while "the Task" runs
						}
						b.StartTimer()
						var got string
						if variant == "streamed-digest-after" {
							beside := make(chan string, 1)
							go func() { beside <- encode.FramesSHA256(v) }()
							err = e.Encode(v)
							got = <-beside
						} else {
							err = e.Encode(v)
							got = e.FramesSHA256()
						}
						b.StopTimer()
						if err != nil {
							b.Fatal(err)
						}
						if got != digest {
							b.Fatalf("%s: frames digest %s, want %s", variant, got, digest)
						}
					}
					got, err := os.ReadFile(path)
					if err != nil || !bytes.Equal(got, wantBytes) {
						b.Fatalf("the clip differs from MP4's (%d bytes, want %d): %v", len(got), len(wantBytes), err)
					}
					if streamed {
						b.ReportMetric(float64(v.N-4), "streamed-frames")
						b.ReportMetric(float64(drain.Milliseconds()), "drain-ms")
					}
				})
			}
		}
	}
}

// BenchmarkPNG times the edit encoder on a 1024² image (the Qwen-Image-Edit pinned size)
// against the standard library's default encoder, which the server used before, and reports
// the file size.
//
//	go test -run '^$' -bench PNG -benchtime 10x ./server/encode/
func BenchmarkPNG(b *testing.B) {
	for _, content := range []string{"noise", "smooth"} {
		v := synthetic(content, 1, 1024, 1024)
		img := v.RGBA(0)
		for name, enc := range map[string]func(*bytes.Buffer) error{
			"encode.PNG":        func(w *bytes.Buffer) error { return encode.PNG(w, v) },
			"image-png-default": func(w *bytes.Buffer) error { return png.Encode(w, img) },
		} {
			b.Run(content+"/"+name, func(b *testing.B) {
				var buf bytes.Buffer
				for i := 0; i < b.N; i++ {
					buf.Reset()
					if err := enc(&buf); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(buf.Len()), "bytes")
			})
		}
	}
}
