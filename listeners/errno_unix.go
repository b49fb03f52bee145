//go:build !windows

package listeners

import (
	"errors"
	"syscall"
)

// connReset reports whether err says the other end reset the connection.
func connReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
