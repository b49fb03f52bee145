//go:build windows

package leadership

import (
	"errors"
	"syscall"
)

// processGone says that no process of this host has pid: OpenProcess finds
// none (ERROR_INVALID_PARAMETER). Access denied means it is there.
func processGone(pid int64) bool {
	if pid <= 0 || pid > 0xFFFFFFFF {
		return false
	}
	h, err := syscall.OpenProcess(syscall.PROCESS_QUERY_INFORMATION, false, uint32(pid))
	if err != nil {
		return errors.Is(err, syscall.Errno(87)) // ERROR_INVALID_PARAMETER
	}
	syscall.CloseHandle(h)
	return false
}
