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

// SetStandbyCertLook makes the engines started during test t look at their
// certificate files every d while they run no graph, instead of every
// tlsfiles.IdleLook; a pair still looks at its files at most once a
// tlsfiles.CheckInterval. Not for parallel tests: standbyCertLook is the
// process's.
func SetStandbyCertLook(t testing.TB, d time.Duration) {
	was := standbyCertLook
	standbyCertLook = d
	t.Cleanup(func() { standbyCertLook = was })
}
