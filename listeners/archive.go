package listeners

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/messagefoundry/mf/internal/noreplace"
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
		err := noreplace.Move(src, dest)
		if !errors.Is(err, fs.ErrExist) || try == 100 {
			return filepath.Base(dest), err
		}
		dest = filepath.Join(dir, fmt.Sprintf("%s.%d", name, time.Now().UnixNano()))
	}
}
