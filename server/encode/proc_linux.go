//go:build linux

package encode

import "syscall"

// dieWithServer has the kernel kill ffmpeg when mediaserve dies, however it dies: an orphaned
// encoder would finish its file after a restarted server swept the artifact directory. The
// signal is tied to the thread that started ffmpeg; Go ends a thread only when a goroutine
// exits locked to it, which nothing in the server does (worker.proc.life unlocks its own).
func dieWithServer() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
