package media

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzReadMP4 feeds the reader mutated files. It must return, without panicking, and
// whatever it accepts must be self-consistent. Seeds: the committed tiny clips (one
// plain with faststart, one fragmented), their truncations, and synthetic files.
func FuzzReadMP4(f *testing.F) {
	for _, name := range []string{"tiny.mp4", "tiny-frag.mp4", "tiny-bframes.mp4", "tiny-bframes-frag.mp4"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		for _, n := range []int{0, 7, 8, 16, len(data) / 4, len(data) / 2, len(data) - 1} {
			f.Add(data[:n])
		}
	}
	for _, mod := range []func(s *synth){
		func(s *synth) {},
		func(s *synth) { s.bigHeaders, s.co64 = true, true },
		func(s *synth) { s.stsz = bx("stz2", full(0, 0), u32(4, 6), []byte{0xaa, 0xaa, 0xaa}) },
		func(s *synth) { s.stss = bx("stss", full(0, 0), u32(2, 1, 4)) },
		func(s *synth) { s.tail = fragment(1, 0, true) },
	} {
		s := newSynth()
		mod(s)
		f.Add(s.bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkMP4(t, data)
	})
}

// checkMP4 parses data; whatever the reader accepts must be self-consistent.
func checkMP4(t *testing.T, data []byte) {
	t.Helper()
	info, err := ReadMP4(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return
	}
	for i, tr := range info.Tracks {
		var n uint64
		for _, r := range tr.Deltas {
			n += r.Count
		}
		if n != uint64(tr.SampleCount) {
			t.Errorf("track %d: deltas cover %d samples, SampleCount %d", i, n, tr.SampleCount)
		}
		if tr.KeyFrames < 0 || tr.KeyFrames > tr.SampleCount {
			t.Errorf("track %d: %d keyframes of %d samples", i, tr.KeyFrames, tr.SampleCount)
		}
		n = 0
		for _, r := range tr.Offsets {
			n += r.Count
		}
		if n != uint64(tr.SampleCount) {
			t.Errorf("track %d: composition offsets cover %d samples, SampleCount %d", i, n, tr.SampleCount)
		}
		if d, err := tr.PresentationDeltas(); err == nil && len(d) != max(0, int(tr.SampleCount)-1) {
			t.Errorf("track %d: %d presentation deltas of %d samples", i, len(d), tr.SampleCount)
		} else if err != nil && tr.SampleCount <= MaxTimedFrames {
			t.Errorf("track %d: %d samples not timed: %v", i, tr.SampleCount, err)
		}
	}
	if info.VideoTrack >= 0 {
		v := info.Tracks[info.VideoTrack]
		if int64(info.Frames) != v.SampleCount {
			t.Errorf("Frames %d, SampleCount %d", info.Frames, v.SampleCount)
		}
		if (info.FPS == nil) != (v.MediaDuration() == 0 || v.Timescale == 0) {
			t.Errorf("FPS %v with duration %d, timescale %d", info.FPS, v.MediaDuration(), v.Timescale)
		}
	} else if info.FPS != nil || info.Frames != 0 {
		t.Errorf("no video track but Frames %d, FPS %v", info.Frames, info.FPS)
	}
}

// TestReadMP4ByteMutations is a deterministic complement to the fuzzer: every byte of
// the seed clips overwritten with a few values, each result parsed and checked.
func TestReadMP4ByteMutations(t *testing.T) {
	for _, name := range []string{"tiny.mp4", "tiny-frag.mp4", "tiny-bframes.mp4", "tiny-bframes-frag.mp4"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(t, err)
		m := make([]byte, len(data))
		for i := range data {
			for _, v := range []byte{0x00, 0x01, 0x7f, 0xff, data[i] ^ 0x80} {
				copy(m, data)
				m[i] = v
				checkMP4(t, m)
			}
		}
	}
}
