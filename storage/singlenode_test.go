package storage

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A single node whose lock session stops answering, its ping hung past its
// timeout (a driver that does not heed it, a watch held up), refuses its
// writes with the zero fence once the trust window has passed since the
// last ping that answered, without waiting for the ping to fail; writes
// with another fence are not its business. Once a ping answers again, they
// are let through.
func TestASingleNodeWhosePingHangsRefusesItsWrites(t *testing.T) {
	const check = 100 * time.Millisecond
	session := &hangingSession{}
	n := &SingleNode{Dialect: "test"}
	if _, err := n.Hold(context.Background(), check, 0, func(context.Context, LockSession) (LockSession, error) { return session, nil }); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.RefuseUnheld("", 0); err != nil {
		t.Fatalf("a write of the single node that has just taken its lock: %v", err)
	}

	release := session.hang()
	defer release() // before Close, which waits for the watch
	// Its ping never fails: the refusal comes from the trust window alone.
	waitUntil(t, "the write refused", func() bool { return errors.Is(n.RefuseUnheld("", 0), ErrLockDown) })
	if err := n.RefuseUnheld("node-a", 3); err != nil {
		t.Fatalf("a clustered write: %v; want it let through", err)
	}

	release()
	waitUntil(t, "the writes let through again", func() bool { return n.RefuseUnheld("", 0) == nil })
}

// hangingSession is a lock session whose Ping answers (never an error),
// but from hang on only once the function hang returns is called (once or
// more), whatever its context.
type hangingSession struct {
	mu   sync.Mutex
	held chan struct{}
}

func (s *hangingSession) hang() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := make(chan struct{})
	s.held = held
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			close(held)
			s.held = nil
		})
	}
}

func (s *hangingSession) Ping(context.Context) error {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held != nil {
		<-held
	}
	return nil
}

func (s *hangingSession) Close() {}

// waitUntil polls cond every millisecond until it holds, for at most 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
	}
}

// A take slower than the trust window (a slow connect) leaves the node
// trusting its lock when Hold returns: it pings at once rather than refuse
// its writes until the watch's first ping.
func TestASlowTakeIsTrustedWhenHoldReturns(t *testing.T) {
	const check = 300 * time.Millisecond
	n := &SingleNode{Dialect: "test"}
	if _, err := n.Hold(context.Background(), check, 0, func(context.Context, LockSession) (LockSession, error) {
		time.Sleep(2*check + 100*time.Millisecond) // a slow connect (TLS, DNS, a loaded server): past the window
		return answeringSession{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.RefuseUnheld("", 0); err != nil {
		t.Fatalf("a write right after Hold returned the lock held: %v", err)
	}
}

type answeringSession struct{}

func (answeringSession) Ping(context.Context) error { return nil }
func (answeringSession) Close()                     {}
