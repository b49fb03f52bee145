//go:build !unix

package listeners

import "os"

// openListed opens the file at path for reading (Windows has no named
// pipes in a directory, whose open would wait: see open_unix.go).
func openListed(path string) (*os.File, error) { return os.Open(path) }
