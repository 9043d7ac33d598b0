// Package proctest helps tests with the processes they start: proving them gone, sharing
// their output.
package proctest

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Gone reports whether pid no longer runs: absent, or a zombie awaiting its reaper (a sandbox
// whose PID 1 does not reap leaves killed processes as zombies).
func Gone(pid int) bool {
	st := State(pid)
	return st == 0 || st == 'Z' || st == 'X'
}

// State is pid's state letter in /proc (R, S, T for stopped, Z, ...): 0 when there is no
// such process, '?' when its state cannot be read.
func State(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		return '?'
	}
	// "pid (comm) state ...": comm may hold spaces, so look after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || len(s) < i+3 {
		return 0
	}
	return s[i+2]
}

// AssertGone fails t unless pid is gone within d.
func AssertGone(t testing.TB, pid int, d time.Duration) bool {
	t.Helper()
	return assert.Eventually(t, func() bool { return Gone(pid) }, d, 10*time.Millisecond, "process %d still running", pid)
}

// WithArg lists the running processes (zombies aside) one of whose arguments contains s: the
// way to find a child that outlived its parent and was handed to another reaper.
func WithArg(s string) []int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || Gone(pid) {
			continue
		}
		if b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Buffer is a process's output shared between the goroutine that copies it and the test that
// reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes is a copy of what was written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}
