package actors

import (
	"testing"
	"time"
)

// SetPurgeFirst makes every graph started during test t purge d after it
// starts, instead of a minute. Not for parallel tests: purgeFirst is the
// process's.
func SetPurgeFirst(t testing.TB, d time.Duration) {
	first := purgeFirst
	purgeFirst = d
	t.Cleanup(func() { purgeFirst = first })
}
