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
