//go:build unix

package leadership

import (
	"errors"
	"syscall"
)

// processGone says that no process of this host has pid (signal 0 finds
// none). A process of another user answers EPERM: it is there.
func processGone(pid int64) bool {
	if pid <= 0 || pid != int64(int(pid)) {
		return false
	}
	return errors.Is(syscall.Kill(int(pid), 0), syscall.ESRCH)
}
