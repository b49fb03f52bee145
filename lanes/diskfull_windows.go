//go:build windows

package lanes

import (
	"errors"

	"golang.org/x/sys/windows"
)

// diskFull reports whether err says the volume has no space left. Windows
// says so with its own error codes: syscall.ENOSPC there is a value Go
// invented, which no file operation returns.
func diskFull(err error) bool {
	return errors.Is(err, windows.ERROR_DISK_FULL) || errors.Is(err, windows.ERROR_HANDLE_DISK_FULL)
}

// cannotSyncDir: a directory is not synced on Windows (see syncDir).
func cannotSyncDir(error) bool { return false }
