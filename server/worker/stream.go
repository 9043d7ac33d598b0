package worker

import (
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/models/spec"
)

// stream is a job's raw frame file as the worker fills it. Frames events (docs/WORKER.md)
// announce frames while the job runs: the first allocates the buffer once, at the request's
// final size, so the slices handed to Request.Frames never move, and each reads only what it
// announces; the result reads the rest. Without frames events the result reads the whole file
// in one read, as it is.
type stream struct {
	id, path  string
	size      spec.Size // the request's frame size
	maxFrames int       // the request's frame count
	f         *os.File  // open from the first read
	buf       []byte
	n         int // frames read so far
}

func newStream(id, path string, s spec.Settings) *stream {
	return &stream{id: id, path: path, size: s.Size, maxFrames: max(s.NumFrames, 1)}
}

func badOutput(format string, a ...any) error {
	return &spec.Error{Code: CodeBadOutput, Message: fmt.Sprintf(format, a...)}
}

// announce checks a frames event against the rules and returns the newly announced bytes.
func (s *stream) announce(m message) ([]byte, error) {
	switch {
	case m.malformed != "":
		return nil, badOutput("%s", m.malformed)
	case m.ID != s.id:
		return nil, badOutput("frames event for job %q while job %s runs", m.ID, s.id)
	case m.Width != s.size.W || m.Height != s.size.H:
		return nil, badOutput("frames event of %dx%d frames: the request's (and any earlier event's) are %s", m.Width, m.Height, s.size)
	case m.Frames <= s.n:
		return nil, badOutput("frames event of %d frames after %d: the count must increase", m.Frames, s.n)
	case m.Frames > s.maxFrames:
		return nil, badOutput("frames event of %d frames: the request has %d", m.Frames, s.maxFrames)
	}
	if s.buf == nil {
		s.buf = make([]byte, s.maxFrames*3*s.size.W*s.size.H)
	}
	from := s.n * 3 * s.size.W * s.size.H
	pix, err := s.read(from, m.Frames)
	if err != nil {
		return nil, err
	}
	s.n = m.Frames
	return pix, nil
}

// result checks the result line against the file and what frames events announced, and
// returns the frames.
func (s *stream) result(m message) (spec.Video, error) {
	n, w, h := m.Frames, m.Width, m.Height
	if n <= 0 || w <= 0 || h <= 0 || n > 1<<16 || w > 1<<15 || h > 1<<15 {
		return spec.Video{}, badOutput("result declares frames=%d width=%d height=%d", n, w, h)
	}
	if s.buf != nil {
		switch {
		case w != s.size.W || h != s.size.H:
			return spec.Video{}, badOutput("result declares %dx%d frames, the frames events %s", w, h, s.size)
		case n < s.n:
			return spec.Video{}, badOutput("result declares %d frames, fewer than the %d the frames events announced", n, s.n)
		case n > s.maxFrames:
			return spec.Video{}, badOutput("result declares %d frames, more than the %d asked, after frames events", n, s.maxFrames)
		}
	}
	want := int64(n) * int64(w) * int64(h) * 3
	if err := s.open(); err != nil {
		return spec.Video{}, err
	}
	st, err := s.f.Stat()
	if err != nil {
		return spec.Video{}, badOutput("stat raw frames: %v", err)
	}
	if st.Size() != want {
		return spec.Video{}, badOutput("raw frames: expected %d bytes (%d frames × %dx%d × 3 rgb24), got %d", want, n, w, h, st.Size())
	}
	if s.buf == nil {
		s.buf, s.size = make([]byte, want), spec.Size{W: w, H: h}
	}
	if _, err := s.read(s.n*3*w*h, n); err != nil {
		return spec.Video{}, err
	}
	return spec.Video{W: w, H: h, N: n, Pix: s.buf[:want]}, nil
}

// read reads the bytes from offset from up to the end of frame n into the buffer and returns
// them.
func (s *stream) read(from, n int) ([]byte, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	to := n * 3 * s.size.W * s.size.H
	got, err := s.f.ReadAt(s.buf[from:to], int64(from))
	if err != nil {
		size := "?"
		if st, serr := s.f.Stat(); serr == nil {
			size = fmt.Sprint(st.Size())
		}
		return nil, badOutput("raw frames: %d frames announced (%d bytes), the output file holds %s (reading: %v after %d bytes)",
			n, to, size, err, from+got)
	}
	return s.buf[from:to], nil
}

func (s *stream) open() error {
	if s.f != nil {
		return nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return badOutput("opening raw frames: %v", err)
	}
	s.f = f
	return nil
}

func (s *stream) close() {
	if s.f != nil {
		s.f.Close()
	}
}
