//go:build unix

package sqlite

import (
	"errors"

	"golang.org/x/sys/unix"
)

// canWrite reports why this process could not open the existing file at
// path for writing, or nil. It asks the kernel (access(2)) rather than
// opening the file: closing a descriptor of the database would drop the
// POSIX locks another handle of this process holds on it. The kernel's
// answer covers modes, owners, read-only mounts and immutable files, root
// included.
func canWrite(path string) error { return unix.Access(path, unix.W_OK) }

// readOnlyFS reports whether the file system of the file at path refuses
// writes (EROFS). The mount's flags do not tell: ext4 refuses every write
// after an error with errors=remount-ro while the mount still says rw
// ("emergency_ro" on Linux 6.x), and access(2) answers as if writable. So
// it sets the file's access time to now, a write of the file's inode that
// SQLite does not look at; its modification time is left alone (set back
// to what it was read, it could move behind a checkpoint's write made in
// between, and a backup that compares times would skip the changed file).
func readOnlyFS(path string) bool {
	if errors.Is(unix.Access(path, unix.W_OK), unix.EROFS) {
		return true
	}
	times := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_OMIT}}
	return errors.Is(unix.UtimesNanoAt(unix.AT_FDCWD, path, times, 0), unix.EROFS)
}
