//go:build windows

package listeners

import (
	"errors"

	"golang.org/x/sys/windows"
)

// Windows reports this with Winsock's error codes: the
// syscall.ECONNRESET of a Windows build is a value Go
// invented, which no socket operation returns.

// connReset reports whether err says the other end reset or aborted the
// connection.
func connReset(err error) bool {
	return errors.Is(err, windows.WSAECONNRESET) || errors.Is(err, windows.WSAECONNABORTED)
}
