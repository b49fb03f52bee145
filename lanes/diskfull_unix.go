//go:build !windows

package lanes

import (
	"errors"
	"syscall"
)

// diskFull reports whether err says the file system has no space left.
func diskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }
