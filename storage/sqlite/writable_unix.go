//go:build unix

package sqlite

import "golang.org/x/sys/unix"

// canWrite reports why this process could not open the existing file at
// path for writing, or nil. It asks the kernel (access(2)) rather than
// opening the file: closing a descriptor of the database would drop the
// POSIX locks another handle of this process holds on it. The kernel's
// answer covers modes, owners, read-only mounts and immutable files, root
// included.
func canWrite(path string) error { return unix.Access(path, unix.W_OK) }
