// Package procgroup starts a child of the suite in a process group of its own. A terminal's
// Ctrl-C (SIGINT to the foreground process group) then reaches the suite alone, which reports
// the run interrupted, instead of also killing the child mid-stage so that the stage reads as
// failed; the child and everything it started (AIPerf's workers, a worker's ranks) are stopped
// through the command's context, as a whole group.
package procgroup

import (
	"os/exec"
	"syscall"
	"time"
)

// Own puts cmd (made with exec.CommandContext) in a process group of its own (Attr) and makes
// the context's end kill that whole group; Wait gives up on its output 10 s after that.
func Own(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = Attr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}
