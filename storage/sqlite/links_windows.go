//go:build windows

package sqlite

import (
	"os"

	"golang.org/x/sys/windows"
)

// linkCount is the number of names (hard links) the file at path has.
func linkCount(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var info windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(windows.Handle(f.Fd()), &info); err != nil {
		return 0, err
	}
	return uint64(info.NumberOfLinks), nil
}
