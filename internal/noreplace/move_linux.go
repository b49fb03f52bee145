package noreplace

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Move renames src to dest in one step, failing with fs.ErrExist if dest
// exists (renameat2 RENAME_NOREPLACE, Linux 3.15). A file system that does
// not support the flag (EINVAL) gets a hard link and a removal.
func Move(src, dest string) error {
	err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dest, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return linkThenRemove(src, dest)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: src, New: dest, Err: err}
	}
	return nil
}
