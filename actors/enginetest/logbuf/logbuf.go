// Package logbuf is a log sink that tests read while actors write to it.
// It imports nothing of mf's, so that a package's internal tests (lanes,
// listeners, actors) may use it where importing enginetest, which imports
// actors, would be an import cycle.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer safe for concurrent use, whose content a test
// reads with String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
