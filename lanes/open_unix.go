//go:build !windows

package lanes

import "syscall"

// noBlockNoFollow opens a file without waiting for a writer (a FIFO) and
// without following a symbolic link at its name (sameContent).
const noBlockNoFollow = syscall.O_NONBLOCK | syscall.O_NOFOLLOW
