package lanes

import (
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// A destination that fails some sends and takes others is logged once a
// minute, and its deliveries end only logged failures with a line.
func TestAnOutageOfADestinationTakingSomeMessagesIsLoggedOnceAMinute(t *testing.T) {
	var o outage
	start := time.Now()
	lines := 0
	for i := range 120 { // a failure and a delivery a second, for two minutes
		if log, _ := o.failed(start.Add(time.Duration(i) * time.Second)); log {
			lines++
		}
		if o.over() > 0 {
			lines++
		}
	}
	if lines != 4 { // at 0 s and 60 s: the failure, and the delivery after it
		t.Fatalf("%d lines for two minutes of a failure and a delivery each second; want 4", lines)
	}
	// Failures that last: logged when they start and once a minute, with
	// how many there were; the delivery that ends them says how many.
	var down outage
	var counts []int
	for i := range 150 {
		if log, n := down.failed(start.Add(time.Duration(i) * time.Second)); log {
			counts = append(counts, n)
		}
	}
	if len(counts) != 3 || counts[0] != 1 || counts[1] != 61 || counts[2] != 121 || down.over() != 150 || down.over() != 0 {
		t.Fatalf("failures logged at counts %v over 150 s (OutageRepeat %v); want 1, 61, 121, and 150 at the delivery", counts, storage.OutageRepeat)
	}
}

// Failures that start within a minute of the destination's last WARN are
// not logged at their start: if they last, at their first failure a minute
// or more after that WARN, counted from their start; their end then has its
// line. (README, create_directory: "at most one such line a minute".)
func TestAnOutageStartingWithinAMinuteOfTheLastWarningIsLoggedWhenTheMinuteIsOut(t *testing.T) {
	var o outage
	start := time.Now()
	if log, _ := o.failed(start); !log {
		t.Fatal("the first failure was not logged")
	}
	if n := o.over(); n != 1 {
		t.Fatalf("the delivery after a logged failure ends %d failures; want 1", n)
	}
	var logged []int
	for i := 30; i < 90; i++ { // failing again from 30 s, each second
		if log, n := o.failed(start.Add(time.Duration(i) * time.Second)); log {
			logged = append(logged, n)
		}
	}
	if len(logged) != 1 || logged[0] != 31 || o.over() != 60 {
		t.Fatalf("failures from 30 s to 89 s logged at counts %v; want one line, at 60 s with 31 failures, and 60 at the delivery", logged)
	}
}
