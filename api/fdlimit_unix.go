//go:build unix

package api

import "syscall"

// fdLimit is the process's limit of open file descriptors (its soft
// RLIMIT_NOFILE, which Go raises to the hard one at start), 0 if unknown.
func fdLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur)
}
