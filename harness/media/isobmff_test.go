package media

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadMP4AgreesWithFFprobe checks the container reader against ffprobe on clips
// that differ in size, rate, length, codec, moov placement and fragmentation.
func TestReadMP4AgreesWithFFprobe(t *testing.T) {
	requireFFmpeg(t)
	dir := t.TempDir()
	for _, c := range clips {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := c.make(t, dir)
			info, err := ReadMP4File(path)
			require.NoError(t, err)
			p, err := FFprobe(context.Background(), path)
			require.NoError(t, err)

			assert.Equal(t, "isom", info.MajorBrand)
			assert.Equal(t, p.Frames, info.Frames, "frames")
			assert.Equal(t, c.n, info.Frames, "frames asked of ffmpeg")
			assert.Equal(t, p.Width, info.Width)
			assert.Equal(t, p.Height, info.Height)
			assert.Equal(t, c.w, info.Width)
			assert.Equal(t, c.h, info.Height)
			assert.InDelta(t, p.DurationS, info.DurationS, 1e-6, "duration")
			require.GreaterOrEqual(t, info.VideoTrack, 0)
			v := info.Tracks[info.VideoTrack]
			assert.Equal(t, "vide", v.Handler)
			assert.Equal(t, c.codec, v.Codec)
			assert.Equal(t, map[string]string{"avc1": "h264", "mp4v": "mpeg4", "hvc1": "hevc"}[v.Codec], p.Codec)
			assert.Equal(t, "stsz", v.SampleSizeBox)
			assert.Equal(t, v.DeltaTotal, v.MediaDuration(), "stts sums to the media duration")
			assert.Equal(t, ffprobeKeyframes(t, path), int(v.KeyFrames), "keyframes")
			if c.wantKeyframes > 0 {
				assert.Equal(t, c.wantKeyframes, int(v.KeyFrames))
			}
			assert.Equal(t, strings.Contains(c.name, "fragmented"), info.Fragmented)
			deltas, err := v.PresentationDeltas()
			require.NoError(t, err)
			assert.Equal(t, ffprobePTSDeltas(t, path), deltas, "every frame's presentation time, ffprobe's packet pts")
			if c.name == "x264-320x192-16fps-17f-faststart" || c.name == "x264-320x192-16fps-17f-fragmented" {
				assert.Greater(t, len(v.Offsets), 1, "x264's B-frames are presented out of decode order (ctts, trun offsets)")
			}
			if c.audioFirst {
				assert.Equal(t, 1, info.VideoTrack)
				assert.Equal(t, "soun", info.Tracks[0].Handler)
				assert.Equal(t, "mp4a", info.Tracks[0].Codec)
			}
			if c.vfr {
				assert.False(t, v.ConstantRate(), "deltas %v", v.Deltas)
				lo, hi := v.DeltaRange()
				assert.Equal(t, 2*lo, hi, "the dropped frame doubles one delta: %v", v.Deltas)
				return
			}
			assert.True(t, v.ConstantRate(), "deltas %v", v.Deltas)
			require.NotNil(t, info.FPS)
			assert.Zero(t, info.FPS.Cmp(&p.FPS), "fps %s, ffprobe %s", info.FPS, p.FPS.String())
			assert.Zero(t, info.FPS.Cmp(big.NewRat(int64(c.fps), 1)), "fps %s", info.FPS)
		})
	}
}

// TestReadMP4Truncated cuts real files everywhere that matters: every cut must fail,
// including cuts at box boundaries, which only the chunk-offset check can see.
func TestReadMP4Truncated(t *testing.T) {
	requireFFmpeg(t)
	dir := t.TempDir()
	for _, c := range clipsNamed("x264-320x192-16fps-17f-faststart", "mpeg4-832x480-24fps-49f", "x264-320x192-16fps-17f-fragmented",
		"x264-160x96-12fps-30f-fragmented-moov-samples") {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(c.make(t, dir))
			require.NoError(t, err)
			_, err = ReadMP4(bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			cuts := []int{0, 1, 7, 8, 9, 15, 16, len(data) - 1}
			for i := 17; i < len(data); i += max(len(data)/257, 1) {
				cuts = append(cuts, i)
			}
			edges := topLevelEdges(t, data)
			cuts = append(cuts, edges...)
			for _, n := range cuts {
				if n >= len(data) {
					continue
				}
				_, err := ReadMP4(bytes.NewReader(data[:n]), int64(n))
				if strings.Contains(c.name, "fragmented") && err == nil && slices.Contains(edges, n) {
					// A fragmented file cut after a whole fragment is a shorter valid file.
					continue
				}
				assert.Error(t, err, "cut at %d of %d", n, len(data))
			}
			// A size larger than the data: the reader meets the end while reading
			// headers. (Sample data itself is never read, so a lie that ends inside
			// mdat goes unseen: pass the true size.)
			_, err = ReadMP4(bytes.NewReader(data), int64(len(data)+100))
			assert.ErrorContains(t, err, "truncated")
		})
	}
}

// topLevelEdges returns the offsets where top-level boxes end.
func topLevelEdges(t *testing.T, data []byte) []int {
	var edges []int
	for off := 0; off+8 <= len(data); {
		n := int(binary.BigEndian.Uint32(data[off:]))
		require.GreaterOrEqual(t, n, 8)
		off += n
		edges = append(edges, off)
	}
	return edges
}

func TestReadMP4Garbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 3, 8, 64, 4096, 1 << 16} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		_, err := ReadMP4(bytes.NewReader(b), int64(n))
		assert.Error(t, err, "%d random bytes", n)
	}
	_, err := ReadMP4(bytes.NewReader(nil), 0)
	assert.EqualError(t, err, "moov: missing")
	_, err = ReadMP4File(filepath.Join(t.TempDir(), "absent.mp4"))
	assert.Error(t, err)
	_, err = ReadMP4(bytes.NewReader(nil), -1)
	assert.Error(t, err)
}

// Synthetic files, built box by box, reach the cases ffmpeg never writes.

func bx(typ string, parts ...[]byte) []byte {
	n := 8
	for _, p := range parts {
		n += len(p)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(n))
	b = append(b, typ...)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// bx64 is bx with a 64-bit size header.
func bx64(typ string, parts ...[]byte) []byte {
	b := bx(typ, parts...)
	out := binary.BigEndian.AppendUint32(nil, 1)
	out = append(out, typ...)
	out = binary.BigEndian.AppendUint64(out, uint64(len(b)+8))
	return append(out, b[8:]...)
}

func u32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// full is a FullBox version and flags.
func full(v uint8, flags uint32) []byte { return u32(uint32(v)<<24 | flags) }

func visualEntry(typ string, w, h uint16) []byte {
	e := make([]byte, 78)
	binary.BigEndian.PutUint16(e[6:], 1) // data_reference_index
	binary.BigEndian.PutUint16(e[24:], w)
	binary.BigEndian.PutUint16(e[26:], h)
	return bx(typ, e)
}

// synth is a one-track file whose boxes a test may replace before assembling it.
// Defaults: 6 samples of 10 bytes at 1000 ticks, deltas 100, two chunks of 3 samples.
type synth struct {
	ftyp, mvhd, tkhd, mdhd, hdlr, stsd, stts, stss, stsz, stsc []byte
	co64, bigHeaders, mdatToEnd                                bool
	extraMoov, extraTop, tail                                  []byte
}

// fragment is a moof for track id with two 5-byte samples of 100 ticks, the second
// not a sync sample, and their mdat when withData. order 1 puts trun before tfhd.
func fragment(id uint32, order int, withData bool) []byte {
	tfhd := bx("tfhd", full(0, 0x020000|0x08|0x10|0x20), u32(id, 100, 5, 0))
	trunFor := func(moofLen int) []byte {
		// data_offset, first_sample_flags absent; per-sample flags.
		return bx("trun", full(0, 0x01|0x400), u32(2, uint32(moofLen+8), 0, nonSyncSample))
	}
	build := func(moofLen int) []byte {
		if order == 1 {
			return bx("moof", bx("traf", trunFor(moofLen), tfhd))
		}
		return bx("moof", bx("mfhd", full(0, 0), u32(1)), bx("traf", tfhd, bx("tfdt", full(0, 0), u32(0)), trunFor(moofLen)))
	}
	moof := build(len(build(0)))
	if withData {
		moof = append(moof, bx("mdat", make([]byte, 10))...)
	}
	return moof
}

func newSynth() *synth {
	return &synth{
		ftyp: bx("ftyp", []byte("isom"), u32(512), []byte("isomavc1")),
		mvhd: bx("mvhd", full(0, 0), u32(0, 0, 1000, 600), make([]byte, 80)),
		tkhd: bx("tkhd", full(0, 3), u32(0, 0, 1, 0, 600), make([]byte, 60)),
		mdhd: bx("mdhd", full(0, 0), u32(0, 0, 1000, 600, 0)),
		hdlr: bx("hdlr", full(0, 0), u32(0), []byte("vide"), make([]byte, 13)),
		stsd: bx("stsd", full(0, 0), u32(1), visualEntry("avc1", 64, 48)),
		stts: bx("stts", full(0, 0), u32(1, 6, 100)),
		stsz: bx("stsz", full(0, 0), u32(10, 6)),
		stsc: bx("stsc", full(0, 0), u32(1, 1, 3, 1)),
	}
}

func (s *synth) bytes() []byte {
	mk := bx
	if s.bigHeaders {
		mk = bx64
	}
	build := func(chunk0 uint64) []byte {
		var co []byte
		if s.co64 {
			co = mk("co64", full(0, 0), u32(2), u64(chunk0), u64(chunk0+30))
		} else {
			co = mk("stco", full(0, 0), u32(2, uint32(chunk0), uint32(chunk0+30)))
		}
		stbl := mk("stbl", s.stsd, s.stts, s.stss, s.stsz, s.stsc, co)
		minf := mk("minf", bx("vmhd", full(0, 1), make([]byte, 8)), stbl)
		mdia := mk("mdia", s.mdhd, s.hdlr, minf)
		moov := mk("moov", s.mvhd, mk("trak", s.tkhd, mdia), s.extraMoov)
		return append(append(append([]byte{}, s.ftyp...), s.extraTop...), moov...)
	}
	head := build(0)
	hdr := uint64(8)
	if s.bigHeaders {
		hdr = 16
	}
	head = build(uint64(len(head)) + hdr)
	mdat := mk("mdat", make([]byte, 60))
	if s.mdatToEnd {
		binary.BigEndian.PutUint32(mdat, 0)
	}
	return append(append(head, mdat...), s.tail...)
}

func readSynth(s *synth) (MP4Info, error) {
	b := s.bytes()
	return ReadMP4(bytes.NewReader(b), int64(len(b)))
}

func TestReadMP4Synthetic(t *testing.T) {
	ok := func(check func(t *testing.T, info MP4Info)) func(t *testing.T, info MP4Info, err error) {
		return func(t *testing.T, info MP4Info, err error) {
			require.NoError(t, err)
			check(t, info)
		}
	}
	fails := func(msg string) func(t *testing.T, info MP4Info, err error) {
		return func(t *testing.T, _ MP4Info, err error) {
			require.Error(t, err)
			assert.Contains(t, err.Error(), msg)
		}
	}
	baseline := func(t *testing.T, info MP4Info) {
		assert.Equal(t, 6, info.Frames)
		assert.Equal(t, 64, info.Width)
		assert.Equal(t, 48, info.Height)
		assert.Equal(t, "10", info.FPS.RatString())
		assert.InDelta(t, 0.6, info.DurationS, 1e-12)
		assert.Equal(t, int64(6), info.Tracks[0].KeyFrames, "no stss: all sync")
		assert.False(t, info.Tracks[0].SyncTable)
		assert.Equal(t, uint32(1000), info.Timescale)
		assert.Equal(t, uint64(600), info.Duration)
		assert.Equal(t, []string{"isom", "avc1"}, info.CompatibleBrands)
	}
	for _, tc := range []struct {
		name   string
		mod    func(s *synth)
		expect func(t *testing.T, info MP4Info, err error)
	}{
		{"baseline", func(s *synth) {}, ok(baseline)},
		{"64-bit headers", func(s *synth) { s.bigHeaders = true }, ok(baseline)},
		{"co64", func(s *synth) { s.co64 = true }, ok(baseline)},
		{"mdat to end of file", func(s *synth) { s.mdatToEnd = true }, ok(baseline)},
		{"QuickTime terminator", func(s *synth) { s.extraMoov = u32(0) }, ok(baseline)},
		{"no ftyp", func(s *synth) { s.ftyp = nil }, ok(func(t *testing.T, info MP4Info) {
			assert.Equal(t, "", info.MajorBrand)
			assert.Equal(t, 6, info.Frames)
		})},
		{"mdhd v1, mvhd v1", func(s *synth) {
			s.mdhd = bx("mdhd", full(1, 0), u64(0), u64(0), u32(1000), u64(600), u32(0))
			s.mvhd = bx("mvhd", full(1, 0), u64(0), u64(0), u32(90000), u64(54000), make([]byte, 80))
		}, ok(func(t *testing.T, info MP4Info) {
			baseline2 := info.Tracks[0]
			assert.Equal(t, uint64(600), baseline2.Duration)
			assert.Equal(t, uint32(90000), info.Timescale)
			assert.Equal(t, "10", info.FPS.RatString())
		})},
		{"mdhd duration unknown", func(s *synth) {
			s.mdhd = bx("mdhd", full(0, 0), u32(0, 0, 1000, math.MaxUint32, 0))
		}, ok(baseline)},
		{"variable deltas and stss", func(s *synth) {
			s.stts = bx("stts", full(0, 0), u32(4, 2, 100, 1, 200, 0, 50, 3, 100))
			s.stss = bx("stss", full(0, 0), u32(2, 1, 4))
			s.mdhd = bx("mdhd", full(0, 0), u32(0, 0, 1000, 700, 0))
		}, ok(func(t *testing.T, info MP4Info) {
			tr := info.Tracks[0]
			assert.Equal(t, []DeltaRun{{2, 100}, {1, 200}, {3, 100}}, tr.Deltas, "zero-count entry skipped, neighbours merged")
			assert.False(t, tr.ConstantRate())
			assert.Equal(t, int64(2), tr.KeyFrames)
			assert.Equal(t, "60/7", info.FPS.RatString())
		})},
		{"stz2", func(s *synth) {
			s.stsz = bx("stz2", full(0, 0), u32(4, 6), []byte{0xaa, 0xaa, 0xaa})
		}, ok(func(t *testing.T, info MP4Info) {
			assert.Equal(t, "stz2", info.Tracks[0].SampleSizeBox)
			assert.Equal(t, 6, info.Frames)
		})},
		{"stsz table", func(s *synth) {
			s.stsz = bx("stsz", full(0, 0), u32(0, 6, 10, 10, 10, 10, 10, 10))
		}, ok(baseline)},
		{"audio only", func(s *synth) {
			s.hdlr = bx("hdlr", full(0, 0), u32(0), []byte("soun"), make([]byte, 13))
			s.stsd = bx("stsd", full(0, 0), u32(1), bx("mp4a", make([]byte, 28)))
		}, ok(func(t *testing.T, info MP4Info) {
			assert.Equal(t, -1, info.VideoTrack)
			assert.Nil(t, info.FPS)
			assert.Equal(t, 0, info.Frames)
			assert.Equal(t, 0, info.Tracks[0].Width)
		})},
		{"mdhd truncated", func(s *synth) { s.mdhd = bx("mdhd", full(0, 0), u32(0, 0)) },
			fails("moov/trak[0]/mdia/mdhd: truncated")},
		{"mdhd version 2", func(s *synth) { s.mdhd = bx("mdhd", full(2, 0), make([]byte, 40)) },
			fails("moov/trak[0]/mdia/mdhd: unsupported version 2")},
		{"mdhd missing", func(s *synth) { s.mdhd = nil }, fails("moov/trak[0]/mdia/mdhd: missing")},
		{"mdhd twice", func(s *synth) { s.mdhd = append(s.mdhd, s.mdhd...) }, fails("mdhd: duplicate")},
		{"timescale 0", func(s *synth) { s.mdhd = bx("mdhd", full(0, 0), u32(0, 0, 0, 600, 0)) }, fails("timescale 0")},
		{"stts count huge", func(s *synth) { s.stts = bx("stts", full(0, 0), u32(0xffffffff, 6, 100)) },
			fails("moov/trak[0]/mdia/minf/stbl/stts: 4294967295 entries of 8 bytes overrun the box")},
		{"stts disagrees with stsz", func(s *synth) { s.stts = bx("stts", full(0, 0), u32(1, 5, 100)) },
			fails("stts covers 5 samples, stsz has 6")},
		{"stts duration overflow", func(s *synth) {
			s.stts = bx("stts", full(0, 0), u32(3, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 6, 1))
		}, fails("overflows")},
		{"stsz sizes missing", func(s *synth) { s.stsz = bx("stsz", full(0, 0), u32(0, 6, 10)) },
			fails("stsz: 6 samples need 24 bytes of sizes, box has 4")},
		{"stz2 bad field size", func(s *synth) { s.stsz = bx("stz2", full(0, 0), u32(5, 6), make([]byte, 8)) },
			fails("stz2: field size 5")},
		{"stss beyond samples", func(s *synth) { s.stss = bx("stss", full(0, 0), u32(7, 1, 2, 3, 4, 5, 6, 7)) },
			fails("7 sync samples but 6 samples")},
		{"stss overrun", func(s *synth) { s.stss = bx("stss", full(0, 0), u32(1000, 1)) },
			fails("stss: 1000 entries overrun")},
		{"visual entry short", func(s *synth) { s.stsd = bx("stsd", full(0, 0), u32(1), bx("avc1", make([]byte, 20))) },
			fails("visual sample entry of 28 bytes, needs 86")},
		{"stsd empty", func(s *synth) { s.stsd = bx("stsd", full(0, 0), u32(0)) }, fails("stsd: no sample entries")},
		{"stsd count without entries", func(s *synth) { s.stsd = bx("stsd", full(0, 0), u32(1)) }, fails("stsd: no sample entries")},
		{"stsd missing", func(s *synth) { s.stsd = nil }, fails("moov/trak[0]/mdia/minf/stbl/stsd: missing")},
		{"stsc missing", func(s *synth) { s.stsc = nil }, fails("stbl/stsc: missing")},
		{"fragment", func(s *synth) { s.tail = fragment(1, 0, true) }, ok(func(t *testing.T, info MP4Info) {
			tr := info.Tracks[0]
			assert.True(t, info.Fragmented)
			assert.Equal(t, 8, info.Frames)
			assert.Equal(t, int64(2), tr.FragmentSamples)
			assert.Equal(t, int64(7), tr.KeyFrames, "first fragment sample sync, second not")
			assert.Equal(t, "10", info.FPS.RatString(), "mdhd covers moov samples only; deltas used")
			assert.InDelta(t, 0.8, info.DurationS, 1e-12)
		})},
		{"fragment, unknown track", func(s *synth) { s.tail = fragment(9, 0, true) }, fails("moof[0]/traf[0]/tfhd: unknown track ID 9")},
		{"fragment, trun first", func(s *synth) { s.tail = fragment(1, 1, true) }, fails("moof[0]/traf[0]/trun[0]: precedes tfhd")},
		{"fragment, data missing", func(s *synth) { s.tail = fragment(1, 0, false) }, fails("moof[0]/traf[0]/trun[0]: sample data (offset")},
		{"moof before moov", func(s *synth) { s.extraTop = fragment(1, 0, false) }, fails("moof[0]: precedes moov")},
		{"chunks hold too few samples", func(s *synth) { s.stsc = bx("stsc", full(0, 0), u32(1, 1, 2, 1)) },
			fails("chunks hold 4 samples, moov/trak[0]/mdia/minf/stbl/stsz counts 6")},
		{"chunks hold too many samples", func(s *synth) { s.stsc = bx("stsc", full(0, 0), u32(1, 1, 4, 1)) },
			fails("chunks hold more than the 6 samples")},
		{"stsc does not start at 1", func(s *synth) { s.stsc = bx("stsc", full(0, 0), u32(1, 2, 3, 1)) },
			fails("stsc: first entry does not start at chunk 1")},
		{"chunk past end of file", func(s *synth) { s.stsz = bx("stsz", full(0, 0), u32(11, 6)) },
			fails("stco: chunk 2 (offset")},
		{"box overruns parent", func(s *synth) {
			s.extraMoov = u32(100)
			s.extraMoov = append(s.extraMoov, []byte("free")...)
		}, fails("moov/free: size 100 overruns its parent (8 bytes left)")},
		{"box smaller than header", func(s *synth) { s.extraTop = append(u32(4), []byte("free")...) },
			fails("free: size 4 smaller than its 8-byte header")},
		{"stray bytes", func(s *synth) { s.extraMoov = []byte{1, 2, 3} }, fails("3 stray bytes")},
		{"odd fourcc", func(s *synth) { s.extraMoov = append(u32(6), 0, 1, 2, 3) },
			fails("moov/0x00010203: size 6 smaller")},
		{"duplicate track ID", func(s *synth) {
			// a second trak with the same ID, via extraMoov
			b := newSynth()
			b.extraMoov = nil
			full := b.bytes()
			moov := full[len(b.ftyp):]
			moov = moov[:binary.BigEndian.Uint32(moov)]
			trak := moov[8+len(b.mvhd):]
			s.extraMoov = trak[:binary.BigEndian.Uint32(trak)]
		}, fails("track ID 1 repeated")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynth()
			tc.mod(s)
			info, err := readSynth(s)
			tc.expect(t, info, err)
		})
	}

	t.Run("too many boxes", func(t *testing.T) {
		b := bytes.Repeat(bx("free"), mp4MaxBoxes+1)
		_, err := ReadMP4(bytes.NewReader(b), int64(len(b)))
		assert.ErrorContains(t, err, "more than")
	})
	t.Run("64-bit size overruns file", func(t *testing.T) {
		b := append(append(u32(1), []byte("mdat")...), u64(math.MaxUint64)...)
		_, err := ReadMP4(bytes.NewReader(b), int64(len(b)))
		assert.ErrorContains(t, err, "mdat: size 18446744073709551615 overruns its parent")
	})
}

// ffprobePTSDeltas are the differences between consecutive presentation times of the video
// packets, as ffprobe reads them (in the stream's time base, the track's timescale), sorted.
func ffprobePTSDeltas(t testing.TB, path string) []int64 {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0",
		"-show_entries", "packet=pts", "-of", "csv=p=0", path).Output()
	require.NoError(t, err)
	var pts []int64
	for _, l := range strings.Fields(string(out)) {
		n, err := strconv.ParseInt(strings.TrimSuffix(l, ","), 10, 64)
		require.NoError(t, err, "pts %q", l)
		pts = append(pts, n)
	}
	slices.Sort(pts)
	deltas := []int64{}
	for i := 1; i < len(pts); i++ {
		deltas = append(deltas, pts[i]-pts[i-1])
	}
	return deltas
}
