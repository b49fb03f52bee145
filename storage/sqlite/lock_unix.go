//go:build unix

package sqlite

import (
	"os"
	"syscall"
)

// lockExclusive takes an exclusive flock on f without waiting: it fails at
// once if another process holds one.
func lockExclusive(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
