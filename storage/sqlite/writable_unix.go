//go:build unix

package sqlite

import (
	"errors"
	"os"

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
// it sets the file's modification time to what it is (and its access time
// to that), a write of the file's inode that SQLite does not look at.
func readOnlyFS(path string) bool {
	if errors.Is(unix.Access(path, unix.W_OK), unix.EROFS) {
		return true
	}
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	return errors.Is(os.Chtimes(path, fi.ModTime(), fi.ModTime()), unix.EROFS)
}
