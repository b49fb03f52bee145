// Package ackwait records how long a bench program's ingests waited on the
// store (an ACK's wait) and prints them a window at a time.
package ackwait

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Waits is the ingests' waits since the last Window, and their failures.
// Its zero value is ready; it is safe for concurrent use.
type Waits struct {
	mu      sync.Mutex
	lat     []time.Duration
	failed  atomic.Int64
	lastErr atomic.Value
}

// Add records an ingest that took d.
func (w *Waits) Add(d time.Duration) {
	w.mu.Lock()
	w.lat = append(w.lat, d)
	w.mu.Unlock()
}

// Fail records an ingest that failed.
func (w *Waits) Fail(err error) {
	w.failed.Add(1)
	w.lastErr.Store(err)
}

// Window returns and resets the waits since the last call, as "n ingests,
// ACK wait p50, p99, max".
func (w *Waits) Window() string {
	w.mu.Lock()
	lat := w.lat
	w.lat = nil
	w.mu.Unlock()
	if len(lat) == 0 {
		return "no ingests"
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[int(f*float64(len(lat)-1))].Round(100 * time.Microsecond) }
	return fmt.Sprintf("%d ingests, ACK wait p50 %v, p99 %v, max %v", len(lat), q(0.5), q(0.99), lat[len(lat)-1].Round(100*time.Microsecond))
}

// PrintFailures prints how many ingests failed and the last error, if any
// did.
func (w *Waits) PrintFailures() {
	if n := w.failed.Load(); n > 0 {
		fmt.Printf("load: %d ingests failed, last: %v\n", n, w.lastErr.Load())
	}
}
