//go:build !windows

package lanes

import (
	"errors"
	"syscall"
)

// diskFull reports whether err says the file system has no space left.
func diskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// cannotSyncDir reports whether err, of an fsync of a directory, says the
// file system does not sync directories (some network and FUSE ones answer
// EINVAL; PostgreSQL ignores EBADF and EINVAL there too): nothing to wait
// for, rather than a failure.
func cannotSyncDir(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EBADF) || errors.Is(err, syscall.ENOTSUP)
}
