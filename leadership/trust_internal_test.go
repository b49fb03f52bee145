package leadership

import (
	"testing"
	"time"
)

// A renewal answered after the window has passed cannot reopen it, even
// before the lapse's timer has run (its goroutine may not have been
// scheduled yet): the term ends there. set took only a term already ended
// by the timer for a lapse, and reopened the window otherwise.
func TestARenewalAfterTheWindowEndsTheTermBeforeItsTimerRuns(t *testing.T) {
	tr := NewTrust()
	until := time.Now().Add(20 * time.Millisecond)
	ended := tr.begin(until)
	tr.mu.Lock()
	tr.timer.Stop() // the lapse not run yet
	tr.mu.Unlock()
	for time.Now().Before(until) {
		time.Sleep(time.Millisecond)
	}
	if tr.set(time.Now().Add(time.Second)) {
		t.Fatal("a renewal answered after the window reopened it")
	}
	if tr.Trusted() {
		t.Fatal("the window is open after a renewal answered too late")
	}
	select {
	case <-ended:
	default:
		t.Fatal("the term's Ended is still open after its window passed")
	}
}

// A renewal inside the window moves it.
func TestARenewalInsideTheWindowMovesIt(t *testing.T) {
	tr := NewTrust()
	ended := tr.begin(time.Now().Add(time.Minute))
	next := time.Now().Add(2 * time.Minute)
	if !tr.set(next) || !tr.Trusted() || !tr.until.Load().Equal(next) {
		t.Fatalf("a renewal inside the window did not move it to %v (until %v)", next, tr.until.Load())
	}
	tr.close()
	<-ended
}
