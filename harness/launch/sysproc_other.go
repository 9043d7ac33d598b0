//go:build unix && !linux

package launch

import "syscall"

// sysProcAttr puts the child in its own process group, so that Stop can signal everything it
// spawned. There is no parent-death signal outside Linux: a test binary killed past t.Cleanup
// leaves the server running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
