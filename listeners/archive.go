package listeners

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// archiveFile moves src into dir under name, or, when dir holds a file of
// that name already, under name.<nanoseconds>, and returns the name used.
// It never replaces a file: two file inbounds may share an archive
// directory, and one could archive a file of the same name between the
// other's look for a free name and its rename (with a plain os.Rename, the
// archived copy of the first file was replaced, its bytes gone).
func archiveFile(src, dir, name string) (string, error) {
	dest := filepath.Join(dir, name)
	for try := 0; ; try++ {
		err := moveNoReplace(src, dest)
		if !errors.Is(err, fs.ErrExist) || try == 100 {
			return filepath.Base(dest), err
		}
		dest = filepath.Join(dir, fmt.Sprintf("%s.%d", name, time.Now().UnixNano()))
	}
}

// linkThenRemove moves src to dest unless dest exists (fs.ErrExist), where
// renaming without replacing is not to be had: a hard link fails on an
// existing name, atomically. A crash between the link and the removal
// leaves the file in both places, and the inbound reads it again (its
// messages stored twice, none lost). A file system without hard links
// (FAT, some network shares) falls back to a look and a rename, which
// leaves the window this closes elsewhere.
func linkThenRemove(src, dest string) error {
	err := os.Link(src, dest)
	switch {
	case err == nil:
		return os.Remove(src)
	case errors.Is(err, fs.ErrExist), errors.Is(err, fs.ErrNotExist):
		return err
	}
	if _, serr := os.Lstat(dest); serr == nil {
		return fs.ErrExist
	}
	return os.Rename(src, dest)
}
