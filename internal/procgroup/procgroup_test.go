package procgroup

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The child leads a group of its own, and the context's end kills the whole group: a
// grandchild the child started dies with it.
func TestOwnGroupKilledWhole(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := Own(exec.CommandContext(ctx, "bash", "-c", "sleep 60 & echo $!; wait"))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	buf := make([]byte, 32)
	n, err := out.Read(buf)
	require.NoError(t, err)
	grandchild, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	require.NoError(t, err)
	pgid, err := syscall.Getpgid(cmd.Process.Pid)
	require.NoError(t, err)
	assert.Equal(t, cmd.Process.Pid, pgid, "the child leads its own group, apart from the suite's")
	cancel()
	_ = cmd.Wait()
	assert.Eventually(t, func() bool { return syscall.Kill(grandchild, 0) != nil }, 5*time.Second, 20*time.Millisecond,
		"the grandchild %d died with the group", grandchild)
}
