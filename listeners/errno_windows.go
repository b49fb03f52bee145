//go:build windows

package listeners

import (
	"errors"

	"golang.org/x/sys/windows"
)

// Windows reports these with Winsock's and its own error codes: the
// syscall.EMFILE and syscall.ECONNRESET of a Windows build are values Go
// invented, which no socket operation returns.

// outOfFiles reports whether err says the process has no socket or handle
// left.
func outOfFiles(err error) bool {
	return errors.Is(err, windows.WSAEMFILE) || errors.Is(err, windows.ERROR_TOO_MANY_OPEN_FILES)
}

// connReset reports whether err says the other end reset or aborted the
// connection.
func connReset(err error) bool {
	return errors.Is(err, windows.WSAECONNRESET) || errors.Is(err, windows.WSAECONNABORTED)
}
