//go:build windows

package sqlite

import (
	"errors"
	"os"
)

// canWrite reports why this process could not open the existing file at
// path for writing, or nil: on Windows, its read-only attribute (which Go
// shows as a mode without write permission).
func canWrite(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o200 == 0 {
		return errors.New("the file is read-only")
	}
	return nil
}

// readOnlyFS reports whether the file system of the file at path is
// mounted read-only: not asked on Windows (no access(2) to ask), where only
// SQLITE_READONLY says so.
func readOnlyFS(path string) bool { return false }
