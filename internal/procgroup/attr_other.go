//go:build unix && !linux

package procgroup

import "syscall"

// Attr puts the child in its own process group, so that the suite can signal everything it
// spawned. There is no parent-death signal outside Linux: a test binary killed past t.Cleanup
// leaves the child running.
func Attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
