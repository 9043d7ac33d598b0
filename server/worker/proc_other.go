//go:build unix && !linux

package worker

import (
	"errors"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func blockUntilExited(int) error { return errors.ErrUnsupported }
