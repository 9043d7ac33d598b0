package launch

import "syscall"

// sysProcAttr puts the child in its own process group, so that Stop can signal everything it
// spawned, and asks the kernel to SIGKILL it when the test binary dies, so that a test killed by
// `go test -timeout` (which skips t.Cleanup) leaves no server behind.
//
// Pdeathsig follows the OS thread that forked the child, not the process: it would also fire if
// that thread exited, which the Go runtime does only when a goroutine locked to its thread
// (runtime.LockOSThread) returns without unlocking. Do not call Start from such a goroutine.
// Pdeathsig reaches only the server itself; processes the server spawns need their own
// protection (or the server's) if it is SIGKILLed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
