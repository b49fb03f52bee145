// Package noreplace moves a file to a name unless that name is taken: a
// plain rename replaces whatever file is there, and its bytes are gone.
// The listeners archive with it, and the file destination writes with it.
package noreplace

import (
	"errors"
	"io/fs"
	"os"
)

// linkThenRemove moves src to dest unless dest exists (fs.ErrExist), where
// renaming without replacing is not to be had: a hard link fails on an
// existing name, atomically. A crash between the link and the removal
// leaves the file in both places (for the file inbound, its messages
// stored twice, none lost). A file system without hard links (FAT, some
// network shares) falls back to a look and a rename, which leaves the
// window this closes elsewhere.
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
