//go:build windows

package accept

import (
	"errors"

	"golang.org/x/sys/windows"
)

// OutOfFiles reports whether err says the process has no socket or handle
// left. Windows reports these with Winsock's and its own error codes: the
// syscall.EMFILE of a Windows build is a value Go invented, which no socket
// operation returns.
func OutOfFiles(err error) bool {
	return errors.Is(err, windows.WSAEMFILE) || errors.Is(err, windows.ERROR_TOO_MANY_OPEN_FILES)
}
