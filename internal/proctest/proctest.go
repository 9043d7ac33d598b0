// Package proctest helps tests prove that processes they started are gone.
package proctest

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Gone reports whether pid no longer runs: absent, or a zombie awaiting its reaper (a sandbox
// whose PID 1 does not reap leaves killed processes as zombies).
func Gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// "pid (comm) state ...": comm may hold spaces, so look after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(s[i+1:], " Z") || strings.HasPrefix(s[i+1:], " X")
}

// AssertGone fails t unless pid is gone within d.
func AssertGone(t testing.TB, pid int, d time.Duration) bool {
	t.Helper()
	return assert.Eventually(t, func() bool { return Gone(pid) }, d, 10*time.Millisecond, "process %d still running", pid)
}
