package media

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/bits"
	"os"
	"slices"
)

// A small ISO-BMFF (MP4) reader. It exists so the suite can check container facts
// (frame count, exact frame timing, keyframes) without trusting ffprobe's heuristics,
// and so a malformed artifact from a server under test fails with a named error rather
// than crashing or stalling the harness. Every size read from the file is checked
// against its parent before use; nothing is allocated in proportion to a claimed size,
// only to bytes actually present.

// Limits on structure, so that hostile input costs bounded time.
const (
	mp4MaxDepth       = 10      // container nesting; real files need 6 (moov/trak/mdia/minf/stbl/stsd)
	mp4MaxBoxes       = 1 << 20 // box headers visited in one file
	mp4MaxBrands      = 64      // compatible brands kept from ftyp
	mp4ChunkEntries   = 4096    // table entries read per ReadAt
	visualEntryMinLen = 86      // VisualSampleEntry fixed part, header included
)

// MP4Info is what ReadMP4 found in a file. The leading convenience fields describe the
// first video track (zero, and FPS nil, when there is none).
type MP4Info struct {
	Frames    int      // samples in the first video track
	Width     int      // from its visual sample entry
	Height    int      // from its visual sample entry
	FPS       *big.Rat // Frames*timescale/duration, exact; nil when the duration is zero
	DurationS float64  // media duration of the first video track in seconds

	MajorBrand       string // ftyp major brand; "" when there is no ftyp (old QuickTime)
	MinorVersion     uint32
	CompatibleBrands []string
	Timescale        uint32 // mvhd: movie ticks per second
	Duration         uint64 // mvhd: movie duration in Timescale ticks
	Fragmented       bool   // mvex or moof present; samples then also come from trun boxes
	Tracks           []Track
	VideoTrack       int // index in Tracks of the first "vide" track, -1 when none
}

// Track is one trak, with samples from its stbl plus any movie fragments.
type Track struct {
	ID              uint32 // tkhd track_ID
	Handler         string // hdlr handler_type: "vide", "soun", ...
	Codec           string // type of the first stsd sample entry: "avc1", "hvc1", "mp4v", "mp4a", ...
	Width, Height   int    // visual sample entry; 0 for non-visual tracks
	Timescale       uint32 // mdhd ticks per second
	Duration        uint64 // mdhd duration in Timescale ticks; 0 when unknown (the file wrote 0 or all ones)
	SampleCount     int64  // stsz/stz2 sample_count plus samples in fragments
	FragmentSamples int64  // of SampleCount, those from movie fragments (trun)
	SampleSizeBox   string // "stsz" or "stz2"; "" when absent
	Deltas          []DeltaRun
	DeltaTotal      uint64 // sum of all sample deltas, in Timescale ticks
	KeyFrames       int64  // sync samples: stss entries, all samples when stss is absent, plus fragment sync samples
	SyncTable       bool   // stss present
	// Offsets are the samples' composition offsets (ctts, or trun's), in decode order, as runs:
	// a sample is presented at its decode time plus its offset. A track without them has none.
	Offsets []OffsetRun
}

// OffsetRun is a run of Count consecutive samples presented Offset ticks after they decode.
type OffsetRun struct {
	Count  uint64
	Offset int64
}

// MaxTimedFrames bounds the samples PresentationDeltas times one by one (a clip of 2^20 frames
// is over 12 hours at 24 fps), so a hostile sample count cannot make it allocate without end.
const MaxTimedFrames = 1 << 20

// PresentationDeltas are the differences, in ticks, between consecutive presentation times
// (decode time plus composition offset) of the track's samples, in presentation order: one
// less than the samples. Every frame's time, not the average fps gives.
func (t *Track) PresentationDeltas() ([]int64, error) {
	if t.SampleCount > MaxTimedFrames {
		return nil, fmt.Errorf("%d samples: more than %d to time one by one", t.SampleCount, MaxTimedFrames)
	}
	pts := make([]int64, 0, t.SampleCount)
	var dts int64
	for _, r := range t.Deltas {
		for range r.Count {
			pts = append(pts, dts)
			dts += int64(r.Delta) // at most 2^20 deltas of 2^32: no overflow
		}
	}
	i := 0
	for _, r := range t.Offsets {
		for range r.Count {
			if i == len(pts) {
				return nil, fmt.Errorf("composition offsets for more than the %d samples", len(pts))
			}
			pts[i] += r.Offset
			i++
		}
	}
	if len(t.Offsets) > 0 && i != len(pts) {
		return nil, fmt.Errorf("composition offsets for %d of %d samples", i, len(pts))
	}
	slices.Sort(pts)
	deltas := make([]int64, 0, max(0, len(pts)-1))
	for k := 1; k < len(pts); k++ {
		deltas = append(deltas, pts[k]-pts[k-1])
	}
	return deltas, nil
}

// addOffsets appends n samples presented off ticks after they decode, merging runs.
func (t *Track) addOffsets(n uint64, off int64) {
	if n == 0 {
		return
	}
	if k := len(t.Offsets) - 1; k >= 0 && t.Offsets[k].Offset == off {
		t.Offsets[k].Count += n
		return
	}
	t.Offsets = append(t.Offsets, OffsetRun{Count: n, Offset: off})
}

// DeltaRun is a run of Count consecutive samples lasting Delta ticks each (an stts
// entry or trun durations; equal neighbours are merged, so a constant-rate track has
// exactly one run).
type DeltaRun struct {
	Count uint64
	Delta uint32
}

// ConstantRate reports whether every sample lasts the same number of ticks.
func (t *Track) ConstantRate() bool {
	return len(t.Deltas) <= 1
}

// DeltaRange is the shortest and longest sample duration in ticks (0, 0 without samples).
func (t *Track) DeltaRange() (lo, hi uint32) {
	for i, r := range t.Deltas {
		if i == 0 || r.Delta < lo {
			lo = r.Delta
		}
		if r.Delta > hi {
			hi = r.Delta
		}
	}
	return lo, hi
}

// MediaDuration is the track duration in ticks: mdhd when it is known and covers all
// samples, else the sum of the sample deltas. In fragmented files mdhd is zero or
// covers only the samples in moov.
func (t *Track) MediaDuration() uint64 {
	if t.Duration != 0 && t.FragmentSamples == 0 {
		return t.Duration
	}
	return t.DeltaTotal
}

// FrameRate is SampleCount*Timescale/MediaDuration exactly, nil when undefined.
func (t *Track) FrameRate() *big.Rat {
	d := t.MediaDuration()
	if d == 0 || t.Timescale == 0 {
		return nil
	}
	num := new(big.Int).Mul(big.NewInt(t.SampleCount), new(big.Int).SetUint64(uint64(t.Timescale)))
	return new(big.Rat).SetFrac(num, new(big.Int).SetUint64(d))
}

// DurationSeconds is MediaDuration in seconds (0 when the timescale is zero).
func (t *Track) DurationSeconds() float64 {
	if t.Timescale == 0 {
		return 0
	}
	return float64(t.MediaDuration()) / float64(t.Timescale)
}

// ReadMP4File opens path and reads it with ReadMP4.
func ReadMP4File(path string) (MP4Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return MP4Info{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return MP4Info{}, err
	}
	info, err := ReadMP4(f, st.Size())
	if err != nil {
		return MP4Info{}, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// ReadMP4 parses the size bytes of r as an ISO-BMFF file. It reads box headers and the
// few small tables it needs, skipping media data, so it is cheap on large files.
func ReadMP4(r io.ReaderAt, size int64) (MP4Info, error) {
	if size < 0 {
		return MP4Info{}, fmt.Errorf("negative size %d", size)
	}
	p := &parser{r: r, size: size}
	info := MP4Info{VideoTrack: -1}
	var sawFtyp, sawMoov bool
	err := p.children("", 0, size, 0, func(b box) error {
		switch b.typ {
		case "ftyp":
			if sawFtyp {
				return fmt.Errorf("%s: duplicate", b.path)
			}
			sawFtyp = true
			return p.ftyp(b, &info)
		case "moov":
			if sawMoov {
				return fmt.Errorf("%s: duplicate", b.path)
			}
			sawMoov = true
			return p.moov(b, &info)
		case "moof":
			if !sawMoov {
				return fmt.Errorf("%s: precedes moov", b.path)
			}
			info.Fragmented = true
			return p.moof(b, &info)
		}
		return nil
	})
	if err != nil {
		return MP4Info{}, err
	}
	if !sawMoov {
		return MP4Info{}, errors.New("moov: missing")
	}
	for i := range info.Tracks {
		t := &info.Tracks[i]
		if t.KeyFrames > t.SampleCount {
			return MP4Info{}, fmt.Errorf("moov/trak[%d]: %d sync samples but %d samples", i, t.KeyFrames, t.SampleCount)
		}
		if info.VideoTrack < 0 && t.Handler == "vide" {
			info.VideoTrack = i
		}
	}
	if info.VideoTrack >= 0 {
		t := &info.Tracks[info.VideoTrack]
		if t.SampleCount > math.MaxInt32 {
			return MP4Info{}, fmt.Errorf("moov/trak[%d]: %d samples", info.VideoTrack, t.SampleCount)
		}
		info.Frames = int(t.SampleCount)
		info.Width, info.Height = t.Width, t.Height
		info.FPS = t.FrameRate()
		info.DurationS = t.DurationSeconds()
	}
	return info, nil
}

// box is one box located in the file: header at start, payload [data, end).
type box struct {
	typ              string
	start, data, end int64
	path             string
}

func (b box) len() int64 { return b.end - b.data }

type parser struct {
	r     io.ReaderAt
	size  int64
	boxes int
	// trex defaults by track ID, from moov/mvex.
	trex map[uint32]trex
}

type trex struct{ duration, size, flags uint32 }

// printable renders a fourcc for error paths, hex when it is not plain ASCII.
func printable(t string) string {
	for i := 0; i < len(t); i++ {
		if t[i] < 0x20 || t[i] > 0x7e {
			return fmt.Sprintf("0x%x", t)
		}
	}
	return t
}

// children calls fn for each box in [off, end), in order.
func (p *parser) children(parent string, off, end int64, depth int, fn func(box) error) error {
	if depth > mp4MaxDepth {
		return fmt.Errorf("%s: nested deeper than %d", parent, mp4MaxDepth)
	}
	where := func(t string) string {
		if parent == "" {
			return t
		}
		return parent + "/" + t
	}
	index := map[string]int{}
	for off < end {
		p.boxes++
		if p.boxes > mp4MaxBoxes {
			return fmt.Errorf("%s: more than %d boxes", where("*"), mp4MaxBoxes)
		}
		left := end - off
		if left < 8 {
			// QuickTime allows a 32-bit zero terminator at the end of a container.
			if left == 4 {
				var z [4]byte
				if err := p.readAt(z[:], off, where("terminator")); err != nil {
					return err
				}
				if z == [4]byte{} {
					return nil
				}
			}
			return fmt.Errorf("%s: %d stray bytes at offset %d, too few for a box header", where("*"), left, off)
		}
		var h [16]byte
		if err := p.readAt(h[:8], off, where("*")); err != nil {
			return err
		}
		typ := string(h[4:8])
		name := printable(typ)
		switch typ {
		case "trak", "moof", "traf", "trun":
			name = fmt.Sprintf("%s[%d]", name, index[typ])
			index[typ]++
		}
		path := where(name)
		size := uint64(binary.BigEndian.Uint32(h[:4]))
		hdr := int64(8)
		switch size {
		case 1:
			if left < 16 {
				return fmt.Errorf("%s: truncated 64-bit size at offset %d", path, off)
			}
			if err := p.readAt(h[8:16], off+8, path); err != nil {
				return err
			}
			size = binary.BigEndian.Uint64(h[8:16])
			hdr = 16
		case 0:
			size = uint64(left) // to the end of the parent (the file, at top level)
		}
		if typ == "uuid" {
			hdr += 16
		}
		if size < uint64(hdr) {
			return fmt.Errorf("%s: size %d smaller than its %d-byte header at offset %d", path, size, hdr, off)
		}
		if size > uint64(left) {
			return fmt.Errorf("%s: size %d overruns its parent (%d bytes left) at offset %d", path, size, left, off)
		}
		b := box{typ: typ, start: off, data: off + hdr, end: off + int64(size), path: path}
		if err := fn(b); err != nil {
			return err
		}
		off = b.end
	}
	return nil
}

// readAt fills buf from off, naming what at fault if the file is short.
func (p *parser) readAt(buf []byte, off int64, what string) error {
	if off < 0 || off+int64(len(buf)) > p.size {
		return fmt.Errorf("%s: truncated (needs bytes up to %d, file has %d)", what, off+int64(len(buf)), p.size)
	}
	n, err := p.r.ReadAt(buf, off)
	if n == len(buf) {
		return nil
	}
	if err == nil || err == io.EOF {
		return fmt.Errorf("%s: truncated (read %d of %d bytes at offset %d)", what, n, len(buf), off)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// payload reads n bytes of b's payload from offset off within it.
func (p *parser) payload(b box, off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off+n > b.len() {
		return nil, fmt.Errorf("%s: truncated (needs %d bytes, has %d)", b.path, off+n, b.len())
	}
	buf := make([]byte, n)
	return buf, p.readAt(buf, b.data+off, b.path)
}

// fullBox reads a FullBox version and flags plus the n bytes after them.
func (p *parser) fullBox(b box, n int64) (version uint8, flags uint32, body []byte, err error) {
	buf, err := p.payload(b, 0, 4+n)
	if err != nil {
		return 0, 0, nil, err
	}
	return buf[0], binary.BigEndian.Uint32(buf[:4]) & 0xffffff, buf[4:], nil
}

// table calls fn for count entries of width bytes each, starting at payload offset off,
// reading at most mp4ChunkEntries per call so that a large claimed count costs no
// memory until its bytes are actually read.
func (p *parser) table(b box, off int64, count uint64, width int, fn func(e []byte) error) error {
	if off > b.len() {
		return fmt.Errorf("%s: truncated (needs %d bytes, has %d)", b.path, off, b.len())
	}
	if width > 0 && count > uint64(b.len()-off)/uint64(width) {
		return fmt.Errorf("%s: %d entries of %d bytes overrun the box (%d bytes)", b.path, count, width, b.len()-off)
	}
	if width == 0 {
		return nil
	}
	buf := make([]byte, min(count, mp4ChunkEntries)*uint64(width))
	for count > 0 {
		n := min(count, mp4ChunkEntries)
		chunk := buf[:n*uint64(width)]
		if err := p.readAt(chunk, b.data+off, b.path); err != nil {
			return err
		}
		for i := 0; i < len(chunk); i += width {
			if err := fn(chunk[i : i+width]); err != nil {
				return err
			}
		}
		off += int64(len(chunk))
		count -= n
	}
	return nil
}

// timing reads the timescale and duration that mvhd and mdhd share, in either
// version. An all-ones duration ("unknown") is returned as 0.
func (p *parser) timing(c box) (timescale uint32, duration uint64, err error) {
	v, _, _, err := p.fullBox(c, 0)
	if err != nil {
		return 0, 0, err
	}
	switch v {
	case 0:
		body, err := p.payload(c, 4, 16)
		if err != nil {
			return 0, 0, err
		}
		timescale, duration = binary.BigEndian.Uint32(body[8:]), uint64(binary.BigEndian.Uint32(body[12:]))
		if duration == math.MaxUint32 {
			duration = 0
		}
	case 1:
		body, err := p.payload(c, 4, 28)
		if err != nil {
			return 0, 0, err
		}
		timescale, duration = binary.BigEndian.Uint32(body[16:]), binary.BigEndian.Uint64(body[20:])
		if duration == math.MaxUint64 {
			duration = 0
		}
	default:
		return 0, 0, fmt.Errorf("%s: unsupported version %d", c.path, v)
	}
	return timescale, duration, nil
}

func (p *parser) ftyp(b box, info *MP4Info) error {
	n := min(b.len(), 8+4*mp4MaxBrands)
	buf, err := p.payload(b, 0, n)
	if err != nil {
		return err
	}
	if len(buf) < 8 {
		return fmt.Errorf("%s: truncated (needs 8 bytes, has %d)", b.path, len(buf))
	}
	info.MajorBrand = string(buf[:4])
	info.MinorVersion = binary.BigEndian.Uint32(buf[4:8])
	for i := 8; i+4 <= len(buf); i += 4 {
		info.CompatibleBrands = append(info.CompatibleBrands, string(buf[i:i+4]))
	}
	return nil
}

func (p *parser) moov(b box, info *MP4Info) error {
	sawMvhd := false
	return p.children(b.path, b.data, b.end, 1, func(c box) error {
		switch c.typ {
		case "mvhd":
			if sawMvhd {
				return fmt.Errorf("%s: duplicate", c.path)
			}
			sawMvhd = true
			var err error
			info.Timescale, info.Duration, err = p.timing(c)
			return err
		case "trak":
			t, err := p.trak(c)
			if err != nil {
				return err
			}
			for _, o := range info.Tracks {
				if o.ID == t.ID {
					return fmt.Errorf("%s: track ID %d repeated", c.path, t.ID)
				}
			}
			info.Tracks = append(info.Tracks, t)
		case "mvex":
			info.Fragmented = true
			return p.children(c.path, c.data, c.end, 2, func(e box) error {
				if e.typ != "trex" {
					return nil
				}
				_, _, body, err := p.fullBox(e, 20)
				if err != nil {
					return err
				}
				if p.trex == nil {
					p.trex = map[uint32]trex{}
				}
				p.trex[binary.BigEndian.Uint32(body)] = trex{
					duration: binary.BigEndian.Uint32(body[8:]),
					size:     binary.BigEndian.Uint32(body[12:]),
					flags:    binary.BigEndian.Uint32(body[16:]),
				}
				return nil
			})
		}
		return nil
	})
}

// trakState collects a trak's pieces until they can be checked together.
type trakState struct {
	t                  Track
	seen               map[string]bool
	entry              []byte // first sample entry, up to visualEntryMinLen bytes
	entryLen           int64
	sttsSamples        uint64
	cttsSamples        uint64
	stssCount          uint64
	sampleSizeSamples  uint64
	sawStbl            bool
	stsc, chunkOffsets box // chunkOffsets is stco or co64
	sizes              box // stsz or stz2
	constSize          uint32
	fieldSize          int // bits per entry in sizes (stz2), 32 for an stsz table
	sawMdhd, sawHdlr   bool
	sawSampleSizeTable bool
}

// once rejects a second box of a type that must be unique in its parent.
func (s *trakState) once(c box) error {
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	if s.seen[c.typ] {
		return fmt.Errorf("%s: duplicate", c.path)
	}
	s.seen[c.typ] = true
	return nil
}

func (p *parser) trak(b box) (Track, error) {
	var s trakState
	err := p.children(b.path, b.data, b.end, 2, func(c box) error {
		switch c.typ {
		case "tkhd":
			if err := s.once(c); err != nil {
				return err
			}
			v, _, _, err := p.fullBox(c, 0)
			if err != nil {
				return err
			}
			var off int64
			switch v {
			case 0:
				off = 4 + 8
			case 1:
				off = 4 + 16
			default:
				return fmt.Errorf("%s: unsupported version %d", c.path, v)
			}
			id, err := p.payload(c, off, 4)
			if err != nil {
				return err
			}
			s.t.ID = binary.BigEndian.Uint32(id)
		case "mdia":
			if err := s.once(c); err != nil {
				return err
			}
			return p.mdia(c, &s)
		}
		return nil
	})
	if err != nil {
		return Track{}, err
	}
	t := &s.t
	switch {
	case !s.sawMdhd:
		return Track{}, fmt.Errorf("%s/mdia/mdhd: missing", b.path)
	case !s.sawHdlr:
		return Track{}, fmt.Errorf("%s/mdia/hdlr: missing", b.path)
	case !s.sawStbl:
		return Track{}, fmt.Errorf("%s/mdia/minf/stbl: missing", b.path)
	case s.entry == nil:
		return Track{}, fmt.Errorf("%s/mdia/minf/stbl/stsd: missing", b.path)
	case !s.sawSampleSizeTable:
		return Track{}, fmt.Errorf("%s/mdia/minf/stbl/stsz: missing", b.path)
	}
	if s.seen["ctts"] && s.cttsSamples != s.sttsSamples {
		return Track{}, fmt.Errorf("%s/mdia/minf/stbl: ctts covers %d samples, stts %d", b.path, s.cttsSamples, s.sttsSamples)
	}
	if !s.seen["ctts"] {
		t.addOffsets(s.sttsSamples, 0) // presented when decoded; fragments add theirs after
	}
	if s.sttsSamples != s.sampleSizeSamples {
		return Track{}, fmt.Errorf("%s/mdia/minf/stbl: stts covers %d samples, %s has %d", b.path, s.sttsSamples, t.SampleSizeBox, s.sampleSizeSamples)
	}
	if s.sampleSizeSamples > 0 && t.Timescale == 0 {
		return Track{}, fmt.Errorf("%s/mdia/mdhd: timescale 0", b.path)
	}
	t.SampleCount = int64(s.sampleSizeSamples)
	if err := p.checkChunks(b.path+"/mdia/minf/stbl", &s); err != nil {
		return Track{}, err
	}
	if t.SyncTable {
		if s.stssCount > s.sampleSizeSamples {
			return Track{}, fmt.Errorf("%s/mdia/minf/stbl/stss: %d sync samples but %d samples", b.path, s.stssCount, s.sampleSizeSamples)
		}
		t.KeyFrames = int64(s.stssCount)
	} else {
		t.KeyFrames = t.SampleCount
	}
	if t.Handler == "vide" {
		if s.entryLen < visualEntryMinLen {
			return Track{}, fmt.Errorf("%s/mdia/minf/stbl/stsd/%s: visual sample entry of %d bytes, needs %d", b.path, printable(t.Codec), s.entryLen, visualEntryMinLen)
		}
		t.Width = int(binary.BigEndian.Uint16(s.entry[32:]))
		t.Height = int(binary.BigEndian.Uint16(s.entry[34:]))
	}
	return *t, nil
}

func (p *parser) mdia(b box, s *trakState) error {
	return p.children(b.path, b.data, b.end, 3, func(c box) error {
		switch c.typ {
		case "mdhd":
			if err := s.once(c); err != nil {
				return err
			}
			s.sawMdhd = true
			var err error
			s.t.Timescale, s.t.Duration, err = p.timing(c)
			return err
		case "hdlr":
			if err := s.once(c); err != nil {
				return err
			}
			s.sawHdlr = true
			_, _, body, err := p.fullBox(c, 8)
			if err != nil {
				return err
			}
			s.t.Handler = string(body[4:8])
		case "minf":
			if err := s.once(c); err != nil {
				return err
			}
			return p.children(c.path, c.data, c.end, 4, func(d box) error {
				if d.typ != "stbl" {
					return nil
				}
				if err := s.once(d); err != nil {
					return err
				}
				s.sawStbl = true
				return p.stbl(d, s)
			})
		}
		return nil
	})
}

func (p *parser) stbl(b box, s *trakState) error {
	return p.children(b.path, b.data, b.end, 5, func(c box) error {
		switch c.typ {
		case "stsd":
			if err := s.once(c); err != nil {
				return err
			}
			_, _, body, err := p.fullBox(c, 4)
			if err != nil {
				return err
			}
			if binary.BigEndian.Uint32(body) == 0 {
				return fmt.Errorf("%s: no sample entries", c.path)
			}
			// The first entry is a box of its own; children checks its size.
			first := true
			err = p.children(c.path, c.data+8, c.end, 6, func(e box) error {
				if !first {
					return nil
				}
				first = false
				s.t.Codec = e.typ
				s.entryLen = e.end - e.start
				buf := make([]byte, min(s.entryLen, visualEntryMinLen))
				if err := p.readAt(buf, e.start, e.path); err != nil {
					return err
				}
				s.entry = buf
				return nil
			})
			if err == nil && first {
				err = fmt.Errorf("%s: no sample entries", c.path)
			}
			return err
		case "stts":
			if err := s.once(c); err != nil {
				return err
			}
			_, _, body, err := p.fullBox(c, 4)
			if err != nil {
				return err
			}
			return p.table(c, 8, uint64(binary.BigEndian.Uint32(body)), 8, func(e []byte) error {
				n := uint64(binary.BigEndian.Uint32(e))
				s.sttsSamples += n // at most 2^32 entries of 2^32: no overflow
				return s.t.addDeltas(n, binary.BigEndian.Uint32(e[4:]), c.path)
			})
		case "ctts":
			if err := s.once(c); err != nil {
				return err
			}
			v, _, body, err := p.fullBox(c, 4)
			if err != nil {
				return err
			}
			return p.table(c, 8, uint64(binary.BigEndian.Uint32(body)), 8, func(e []byte) error {
				n, off := uint64(binary.BigEndian.Uint32(e)), int64(binary.BigEndian.Uint32(e[4:]))
				if v == 1 {
					off = int64(int32(binary.BigEndian.Uint32(e[4:])))
				}
				s.cttsSamples += n
				s.t.addOffsets(n, off)
				return nil
			})
		case "stss":
			if err := s.once(c); err != nil {
				return err
			}
			_, _, body, err := p.fullBox(c, 4)
			if err != nil {
				return err
			}
			n := uint64(binary.BigEndian.Uint32(body))
			if n > uint64(c.len()-8)/4 {
				return fmt.Errorf("%s: %d entries overrun the box (%d bytes)", c.path, n, c.len())
			}
			s.t.SyncTable = true
			s.stssCount = n
		case "stsz", "stz2":
			if s.sawSampleSizeTable {
				return fmt.Errorf("%s: second sample size table", c.path)
			}
			s.sawSampleSizeTable = true
			s.t.SampleSizeBox = c.typ
			_, _, body, err := p.fullBox(c, 8)
			if err != nil {
				return err
			}
			n := uint64(binary.BigEndian.Uint32(body[4:]))
			var need uint64 // bytes of per-sample sizes
			if c.typ == "stsz" {
				if binary.BigEndian.Uint32(body) == 0 {
					need = 4 * n
				}
			} else {
				switch fs := body[3]; fs {
				case 4, 8, 16:
					need = (n*uint64(fs) + 7) / 8
				default:
					return fmt.Errorf("%s: field size %d", c.path, fs)
				}
			}
			if need > uint64(c.len()-12) {
				return fmt.Errorf("%s: %d samples need %d bytes of sizes, box has %d", c.path, n, need, c.len()-12)
			}
			s.sampleSizeSamples = n
			s.sizes = c
			if c.typ == "stsz" {
				s.constSize, s.fieldSize = binary.BigEndian.Uint32(body), 32
			} else {
				s.fieldSize = int(body[3])
			}
		case "stsc", "stco", "co64":
			if err := s.once(c); err != nil {
				return err
			}
			if c.typ == "stsc" {
				s.stsc = c
			} else if s.chunkOffsets.typ != "" {
				return fmt.Errorf("%s: second chunk offset table", c.path)
			} else {
				s.chunkOffsets = c
			}
		}
		return nil
	})
}

// addDeltas appends n samples of delta ticks, merging with the previous run.
func (t *Track) addDeltas(n uint64, delta uint32, where string) error {
	if n == 0 {
		return nil
	}
	hi, lo := bits.Mul64(n, uint64(delta))
	sum, carry := bits.Add64(t.DeltaTotal, lo, 0)
	if hi != 0 || carry != 0 {
		return fmt.Errorf("%s: total duration overflows 64 bits", where)
	}
	t.DeltaTotal = sum
	if k := len(t.Deltas) - 1; k >= 0 && t.Deltas[k].Delta == delta {
		t.Deltas[k].Count += n
	} else {
		t.Deltas = append(t.Deltas, DeltaRun{Count: n, Delta: delta})
	}
	return nil
}

// Sample flag bit sample_is_non_sync_sample (ISO/IEC 14496-12 8.8.3.1).
const nonSyncSample = 0x10000

func (p *parser) moof(b box, info *MP4Info) error {
	return p.children(b.path, b.data, b.end, 1, func(c box) error {
		if c.typ != "traf" {
			return nil
		}
		var t *Track
		var def trex // defaults: trex, then tfhd
		var haveDur bool
		// Where the next trun's data starts when it gives no data_offset. Without
		// base_data_offset the base is the moof (exact for the first traf and with
		// default-base-is-moof; an underestimate otherwise, so the check stays safe).
		base := b.start
		next := base
		return p.children(c.path, c.data, c.end, 2, func(d box) error {
			switch d.typ {
			case "tfhd":
				if t != nil {
					return fmt.Errorf("%s: duplicate", d.path)
				}
				_, tf, body, err := p.fullBox(d, 4)
				if err != nil {
					return err
				}
				id := binary.BigEndian.Uint32(body)
				for i := range info.Tracks {
					if info.Tracks[i].ID == id {
						t = &info.Tracks[i]
					}
				}
				if t == nil {
					return fmt.Errorf("%s: unknown track ID %d", d.path, id)
				}
				def, haveDur = p.trex[id]
				field := func(off int64) (uint32, error) {
					v, err := p.payload(d, off, 4)
					if err != nil {
						return 0, err
					}
					return binary.BigEndian.Uint32(v), nil
				}
				off := int64(8)
				if tf&0x01 != 0 {
					v, err := p.payload(d, off, 8)
					if err != nil {
						return err
					}
					bo := binary.BigEndian.Uint64(v)
					if bo > uint64(p.size) {
						return fmt.Errorf("%s: base_data_offset %d beyond the end of the file (%d bytes)", d.path, bo, p.size)
					}
					base, next = int64(bo), int64(bo)
					off += 8
				}
				if tf&0x02 != 0 { // sample_description_index
					off += 4
				}
				if tf&0x08 != 0 {
					if def.duration, err = field(off); err != nil {
						return err
					}
					haveDur = true
					off += 4
				}
				if tf&0x10 != 0 {
					if def.size, err = field(off); err != nil {
						return err
					}
					off += 4
				}
				if tf&0x20 != 0 {
					if def.flags, err = field(off); err != nil {
						return err
					}
				}
			case "trun":
				if t == nil {
					return fmt.Errorf("%s: precedes tfhd", d.path)
				}
				trunVersion, tf, body, err := p.fullBox(d, 4)
				if err != nil {
					return err
				}
				n := uint64(binary.BigEndian.Uint32(body))
				off := int64(8)
				start := next
				if tf&0x01 != 0 {
					v, err := p.payload(d, off, 4)
					if err != nil {
						return err
					}
					start = base + int64(int32(binary.BigEndian.Uint32(v)))
					off += 4
				}
				first, haveFirst := def.flags, false
				if tf&0x04 != 0 {
					v, err := p.payload(d, off, 4)
					if err != nil {
						return err
					}
					first, haveFirst = binary.BigEndian.Uint32(v), true
					off += 4
				}
				perDur, perSize, perFlags, perOffset := tf&0x100 != 0, tf&0x200 != 0, tf&0x400 != 0, tf&0x800 != 0
				if !perDur && !haveDur && n > 0 {
					return fmt.Errorf("%s: no sample duration (no trex, tfhd default or per-sample value)", d.path)
				}
				var bytes uint64 // sample data, at most 2^32 samples of 2^32 bytes
				if !perSize {
					bytes = n * uint64(def.size)
				}
				var i uint64
				addSample := func(du, fl uint32, co int64) error {
					if i == 0 && haveFirst {
						fl = first
					}
					i++
					t.addOffsets(1, co)
					t.SampleCount++
					t.FragmentSamples++
					if fl&nonSyncSample == 0 {
						t.KeyFrames++
					}
					return t.addDeltas(1, du, d.path)
				}
				if width := 4 * bits.OnesCount32(tf&0xf00); width > 0 {
					err = p.table(d, off, n, width, func(e []byte) error {
						du, fl := def.duration, def.flags
						if perDur {
							du = binary.BigEndian.Uint32(e)
							e = e[4:]
						}
						if perSize {
							bytes += uint64(binary.BigEndian.Uint32(e))
							e = e[4:]
						}
						if perFlags {
							fl = binary.BigEndian.Uint32(e)
							e = e[4:]
						}
						var co int64
						if perOffset {
							co = int64(binary.BigEndian.Uint32(e))
							if trunVersion == 1 {
								co = int64(int32(binary.BigEndian.Uint32(e)))
							}
						}
						return addSample(du, fl, co)
					})
				} else {
					// No per-sample data: every sample takes the defaults.
					m := n
					if haveFirst && m > 0 {
						err = addSample(def.duration, first, 0)
						m--
					}
					if err == nil {
						t.addOffsets(m, 0)
						t.SampleCount += int64(m)
						t.FragmentSamples += int64(m)
						if def.flags&nonSyncSample == 0 {
							t.KeyFrames += int64(m)
						}
						err = t.addDeltas(m, def.duration, d.path)
					}
				}
				if err != nil {
					return err
				}
				if start < 0 || start > p.size || bytes > uint64(p.size-start) {
					return fmt.Errorf("%s: sample data (offset %d, %d bytes) extends past the end of the file (%d bytes)", d.path, start, bytes, p.size)
				}
				next = start + int64(bytes)
			}
			return nil
		})
	})
}

// cursor reads fixed-width table entries on demand, a chunk at a time.
type cursor struct {
	p     *parser
	b     box
	off   int64 // next unread payload offset
	left  uint64
	width int
	buf   []byte
	pos   int
}

// newCursor checks that count entries of width bytes fit in b after payload offset off.
func (p *parser) newCursor(b box, off int64, count uint64, width int) (*cursor, error) {
	if off > b.len() || count > uint64(b.len()-off)/uint64(width) {
		return nil, fmt.Errorf("%s: %d entries of %d bytes overrun the box (%d bytes)", b.path, count, width, b.len())
	}
	return &cursor{p: p, b: b, off: off, left: count, width: width}, nil
}

// more reports whether entries remain.
func (c *cursor) more() bool { return c.left > 0 || c.pos < len(c.buf) }

func (c *cursor) next() ([]byte, error) {
	if c.pos == len(c.buf) {
		if c.left == 0 {
			return nil, fmt.Errorf("%s: ran out of entries", c.b.path)
		}
		n := min(c.left, mp4ChunkEntries)
		c.buf = make([]byte, n*uint64(c.width))
		if err := c.p.readAt(c.buf, c.b.data+c.off, c.b.path); err != nil {
			return nil, err
		}
		c.off += int64(len(c.buf))
		c.left -= n
		c.pos = 0
	}
	e := c.buf[c.pos : c.pos+c.width]
	c.pos += c.width
	return e, nil
}

// checkChunks walks stsc, stco/co64 and the sample sizes together and verifies that
// every chunk's data lies inside the file and that the chunks hold exactly the
// samples that stsz counts. This is what catches a file cut short inside mdat when
// the box structure alone still looks whole (mdat of size 0, or a cut at a box edge).
func (p *parser) checkChunks(stbl string, s *trakState) error {
	want := s.sampleSizeSamples
	if want == 0 {
		return nil
	}
	if s.stsc.typ == "" {
		return fmt.Errorf("%s/stsc: missing", stbl)
	}
	if s.chunkOffsets.typ == "" {
		return fmt.Errorf("%s/stco: missing", stbl)
	}
	_, _, h, err := p.fullBox(s.stsc, 4)
	if err != nil {
		return err
	}
	stsc, err := p.newCursor(s.stsc, 8, uint64(binary.BigEndian.Uint32(h)), 12)
	if err != nil {
		return err
	}
	co := s.chunkOffsets
	width := 4
	if co.typ == "co64" {
		width = 8
	}
	if _, _, h, err = p.fullBox(co, 4); err != nil {
		return err
	}
	chunks := uint64(binary.BigEndian.Uint32(h))
	offsets, err := p.newCursor(co, 8, chunks, width)
	if err != nil {
		return err
	}
	var sizes *cursor
	var nibble []byte // stz2 with 4-bit fields: the byte whose low half is the next size
	if s.constSize == 0 {
		n := want
		if s.fieldSize == 4 {
			n = (want + 1) / 2
		}
		if sizes, err = p.newCursor(s.sizes, 12, n, max(s.fieldSize/8, 1)); err != nil {
			return err
		}
	}
	nextSize := func() (uint64, error) {
		if nibble != nil {
			v := uint64(nibble[0] & 0x0f)
			nibble = nil
			return v, nil
		}
		e, err := sizes.next()
		if err != nil {
			return 0, err
		}
		switch s.fieldSize {
		case 4:
			nibble = e
			return uint64(e[0] >> 4), nil
		case 8:
			return uint64(e[0]), nil
		case 16:
			return uint64(binary.BigEndian.Uint16(e)), nil
		}
		return uint64(binary.BigEndian.Uint32(e)), nil
	}
	// stsc entries: first_chunk (1-based, increasing), samples_per_chunk, description index.
	readStsc := func() (first, per uint64, ok bool, err error) {
		if !stsc.more() {
			return 0, 0, false, nil
		}
		e, err := stsc.next()
		if err != nil {
			return 0, 0, false, err
		}
		return uint64(binary.BigEndian.Uint32(e)), uint64(binary.BigEndian.Uint32(e[4:])), true, nil
	}
	nextFirst, nextPer, more, err := readStsc()
	if err != nil {
		return err
	}
	if !more || nextFirst != 1 {
		return fmt.Errorf("%s: first entry does not start at chunk 1", s.stsc.path)
	}
	var per, samples uint64
	for chunk := uint64(1); chunk <= chunks; chunk++ {
		for more && nextFirst <= chunk {
			if nextFirst < chunk {
				return fmt.Errorf("%s: first_chunk %d out of order", s.stsc.path, nextFirst)
			}
			per = nextPer
			if nextFirst, nextPer, more, err = readStsc(); err != nil {
				return err
			}
		}
		e, err := offsets.next()
		if err != nil {
			return err
		}
		var off uint64
		if width == 8 {
			off = binary.BigEndian.Uint64(e)
		} else {
			off = uint64(binary.BigEndian.Uint32(e))
		}
		if per > want-samples {
			return fmt.Errorf("%s: chunks hold more than the %d samples of %s", s.stsc.path, want, s.sizes.path)
		}
		var bytes uint64
		if s.constSize != 0 {
			bytes = per * uint64(s.constSize) // per <= 2^32, size < 2^32
		} else {
			for range per {
				n, err := nextSize()
				if err != nil {
					return err
				}
				bytes += n
			}
		}
		samples += per
		if off > uint64(p.size) || bytes > uint64(p.size)-off {
			return fmt.Errorf("%s: chunk %d (offset %d, %d bytes) extends past the end of the file (%d bytes)", co.path, chunk, off, bytes, p.size)
		}
	}
	if samples != want {
		return fmt.Errorf("%s: chunks hold %d samples, %s counts %d", s.stsc.path, samples, s.sizes.path, want)
	}
	return nil
}
