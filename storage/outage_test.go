package storage

import (
	"testing"
	"time"
)

// A lasting failure is logged at its first failure and then once an
// OutageRepeat; a success ends it with the count, and the next failure is
// logged at once again.
func TestOutageLogsTheStartOnceAMinuteAndTheEnd(t *testing.T) {
	var o Outage
	t0 := time.Unix(1000, 0)
	if n := o.Over(); n != 0 {
		t.Fatalf("a success before any failure ends %d failures", n)
	}
	var logged []int
	for i := range 150 { // one a second, as a lane retries
		if log, n := o.Failed(t0.Add(time.Duration(i) * time.Second)); log {
			logged = append(logged, n)
		}
	}
	if len(logged) != 3 || logged[0] != 1 || logged[1] != 61 || logged[2] != 121 {
		t.Fatalf("150 failures a second apart logged at failures %v, want [1 61 121]", logged)
	}
	if n := o.Over(); n != 150 {
		t.Fatalf("the success ends %d failures, want 150", n)
	}
	if log, n := o.Failed(t0.Add(151 * time.Second)); !log || n != 1 {
		t.Fatalf("the first failure after a success: log %v, failures %d; want logged, 1", log, n)
	}
}
