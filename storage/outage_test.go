package storage

import (
	"testing"
	"time"
)

// A lasting failure is logged at its first failure and then once an
// OutageRepeat; a success ends it with the count, and the next failure is
// logged once OutageRepeat has passed since the last line.
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
	if log, n := o.Failed(t0.Add(151 * time.Second)); log || n != 1 {
		t.Fatalf("a failure 30 s after the last line: log %v, failures %d; want counted, not logged", log, n)
	}
	o.Over()
	if log, n := o.Failed(t0.Add(181 * time.Second)); !log || n != 2 {
		t.Fatalf("a failure a minute after the last line: log %v, failures %d; want logged, with the one not logged: 2", log, n)
	}
}

// Calls that fail and work in turn (a pool whose new sessions the database
// refuses while its open ones work: a role's CONNECTION LIMIT below
// pool_size) are one outage to the log: each failure after a success began
// a new one, logged at once with its end, and a node logged dozens of
// ERROR lines a second. Within OutageRepeat of the last line, a new
// failure is counted, not logged, and its end is not logged either.
func TestOutageThatFlapsIsLoggedOnceAMinute(t *testing.T) {
	var o Outage
	t0 := time.Unix(1000, 0)
	var lines, ends int
	for i := range 1000 { // 10 s of a call failing and working in turn
		if log, _ := o.Failed(t0.Add(time.Duration(i) * 10 * time.Millisecond)); log {
			lines++
		}
		if o.Over() > 0 {
			ends++
		}
	}
	if lines != 1 || ends != 1 {
		t.Fatalf("1000 failures, each followed by a success, in 10 s logged %d failures and %d ends; want 1 and 1", lines, ends)
	}
	log, n := o.Failed(t0.Add(65 * time.Second))
	if !log || n != 1000 {
		t.Fatalf("a failure a minute after the last line: log %v, failures %d; want logged, with the 999 not logged before it and itself", log, n)
	}
	if got := o.Over(); got != 1000 {
		t.Fatalf("its end reports %d failures; want 1000", got)
	}
	if log, n := o.Failed(t0.Add(200 * time.Second)); !log || n != 1 {
		t.Fatalf("the first failure long after the last line: log %v, failures %d; want logged, 1", log, n)
	}
}

// An outage of its own, after calls that worked for a while, is logged
// when it starts even within OutageRepeat of the last line: counted only,
// a database away for 25 s half a minute after a brief failure left no
// line at all (its end was not logged either), while every message was
// answered AE. Only a failure that follows the last one closely (calls
// failing and working in turn) waits for OutageRepeat.
func TestAnOutageAfterAQuietSpellIsLogged(t *testing.T) {
	var o Outage
	t0 := time.Unix(1000, 0)
	if log, _ := o.Failed(t0); !log {
		t.Fatal("the first failure was not logged")
	}
	if n := o.Over(); n != 1 {
		t.Fatalf("its end reports %d failures; want 1", n)
	}
	var lines []int
	for i := range 25 { // 30 s later, an outage of 25 s, a failure a second
		if log, n := o.Failed(t0.Add(30*time.Second + time.Duration(i)*time.Second)); log {
			lines = append(lines, n)
		}
	}
	ended := o.Over()
	if len(lines) == 0 || lines[0] != 1 || ended != 25 {
		t.Fatalf("an outage of 25 failures, 30 s after the last one ended: logged at failures %v, its end reports %d; want logged at its first failure [1] and its end reporting 25", lines, ended)
	}
}
