package api

import "testing"

// The API takes at most half the process's descriptors, and never more
// than maxAPIConns.
func TestAPIConnsFor(t *testing.T) {
	for _, c := range []struct {
		fds  uint64
		want int
	}{{0, maxAPIConns}, {1 << 20, maxAPIConns}, {2 * maxAPIConns, maxAPIConns}, {20000, maxAPIConns}, {1024, 512}, {10, 16}} {
		if got := apiConnsFor(c.fds); got != c.want {
			t.Errorf("apiConnsFor(%d) = %d, want %d", c.fds, got, c.want)
		}
	}
}
