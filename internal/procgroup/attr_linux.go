package procgroup

import "syscall"

// Attr puts the child in its own process group, so that the suite can signal everything it
// spawned, and asks the kernel to SIGKILL it when the test binary dies, so that a test killed by
// `go test -timeout` (which skips t.Cleanup) leaves no child behind.
//
// Pdeathsig follows the OS thread that forked the child, not the process: it would also fire if
// that thread exited, which the Go runtime does only when a goroutine locked to its thread
// (runtime.LockOSThread) returns without unlocking. Do not call Start from such a goroutine.
// Pdeathsig reaches only the child itself; processes it spawns need their own protection
// (or the child's) if it is SIGKILLed.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
