//go:build linux

package worker

import (
	"syscall"
	"unsafe"
)

// sysProcAttr puts the worker in its own process group (so the whole group can be killed)
// and has the kernel kill it if the thread that started it dies (the starting goroutine is
// locked to its thread for the worker's lifetime, see proc.life).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// blockUntilExited waits for pid to exit without reaping it, so that its process group id
// stays reserved while the group is killed.
func blockUntilExited(pid int) error {
	const pPID = 1
	var info [16]uint64 // siginfo_t is 128 bytes
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}
