//go:build unix

package sqlite

import (
	"os"
	"syscall"
)

// linkCount is the number of names (hard links) the file at path has.
func linkCount(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink), nil
	}
	return 1, nil
}
