//go:build windows

package sqlite

import "golang.org/x/sys/windows"

// dirFreeSpace returns the bytes this process may still write on the
// volume of dir (its quota included).
func dirFreeSpace(dir string) (uint64, bool) {
	name, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, false
	}
	var avail, total, free uint64
	if err := windows.GetDiskFreeSpaceEx(name, &avail, &total, &free); err != nil {
		return 0, false
	}
	return avail, true
}
