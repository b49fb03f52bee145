//go:build !windows

package accept

import (
	"errors"
	"syscall"
)

// OutOfFiles reports whether err says the process or the system has no
// file descriptor left.
func OutOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
