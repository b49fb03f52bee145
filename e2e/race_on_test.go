//go:build race

package e2e

// raceEnabled: the tests run under -race, so the binary under test is built
// with it too and the engine's own goroutines are checked end to end.
const raceEnabled = true
