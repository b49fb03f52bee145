//go:build unix

package sqlite

import (
	"os"

	"golang.org/x/sys/unix"
)

// dirFreeSpace returns the bytes this process may still write on the file
// system of dir: root may use the blocks reserved for it, others not.
func dirFreeSpace(dir string) (uint64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	blocks := uint64(st.Bavail)
	if os.Geteuid() == 0 {
		blocks = uint64(st.Bfree)
	}
	return blocks * uint64(st.Bsize), true
}
