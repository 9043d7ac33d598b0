//go:build !linux

package encode

import "syscall"

func dieWithServer() *syscall.SysProcAttr { return nil }
