//go:build !windows

package listeners

import (
	"errors"
	"syscall"
)

// outOfFiles reports whether err says the process or the system has no
// file descriptor left.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// connReset reports whether err says the other end reset the connection.
func connReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
