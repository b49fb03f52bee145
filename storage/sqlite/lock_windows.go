//go:build windows

package sqlite

import (
	"os"

	"golang.org/x/sys/windows"
)

// lockExclusive locks one byte of f far past its end, exclusively and
// without waiting: it fails at once if another process holds it. Windows
// byte-range locks are mandatory, so the lock keeps clear of the bytes at
// the start of the file that carry the holder's pid, which the refused
// process reads to say who holds it.
func lockExclusive(f *os.File) error {
	ol := &windows.Overlapped{OffsetHigh: 1} // 4 GiB in
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
}
