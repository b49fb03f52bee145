package listeners

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
)

// An MLLP listener whose port stays taken retries with a backoff that
// grows to 30 s, and says so at ERROR when it starts and once a minute
// after, not at each attempt (two a minute for as long as it lasted, after
// the first ten); each attempt is at DEBUG.
func TestAPortThatStaysTakenIsLoggedOnceAMinute(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var logs logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sys := actor.NewActorSystem()
	env := &Env{Ctx: ctx, Log: zerolog.New(&logs).Level(zerolog.DebugLevel), System: sys, Binds: &Binds{}}
	pid := sys.Root.Spawn(NewMLLP(env, config.Inbound{Name: "adt_in", Type: config.InboundMLLP, Listen: taken.Addr().String()}))
	t.Cleanup(func() { sys.Root.StopFuture(pid).Wait() })
	attempts := func() int { return strings.Count(logs.String(), "cannot open the MLLP listener") }
	waitFor(t, "three attempts to open the port", 15*time.Second, func() bool { return attempts() >= 3 })
	t.Log(logs.String())
	if errs := strings.Count(logs.String(), `"level":"error"`); errs != 1 {
		t.Fatalf("%d attempts logged %d lines at ERROR; want 1 (when the failures start):\n%s", attempts(), errs, logs.String())
	}
}

// A retry of a bind that failed, its timer firing just as the listener is
// drained (its bind queued behind the Drain), opens no port: it opened one
// that the stop, already done, never closed, so a node that had lost
// leadership kept accepting connections on it, and the next graph could not
// bind it.
func TestABindRetryAfterTheDrainOpensNoPort(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := taken.Addr().String()
	var logs logbuf.Buffer
	sys := actor.NewActorSystem()
	env := &Env{Ctx: t.Context(), Log: zerolog.New(&logs).Level(zerolog.DebugLevel), System: sys, Binds: &Binds{}}
	pid := sys.Root.Spawn(NewMLLP(env, config.Inbound{Name: "adt_in", Type: config.InboundMLLP, Listen: addr,
		MaxConnections: 10, MaxMessageBytes: 1 << 20, IdleTimeoutSeconds: 5, ReadTimeoutSeconds: 5}))
	waitFor(t, "the first bind to fail", 10*time.Second, func() bool { return strings.Contains(logs.String(), "cannot open the MLLP listener") })
	taken.Close() // free again: a retry now binds

	drained := sys.Root.RequestFuture(pid, Drain{}, 10*time.Second)
	sys.Root.Send(pid, bind{}) // the retry's timer, firing behind the Drain
	// A second Drain, answered once the bind{} before it was handled (the
	// stop below, a system message, could otherwise overtake it).
	again := sys.Root.RequestFuture(pid, Drain{}, 10*time.Second)
	for _, f := range []actor.Future{drained, again} {
		if _, err := f.Result(); err != nil {
			t.Fatal(err)
		}
	}
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("after the drain and the stop, %s is still held: %v\n%s", addr, err, logs.String())
	}
	ln.Close()
}

// A port taken in the range the host gives outgoing connections is said to
// be so: one of them may hold it with nothing listening, and "is the port
// taken" alone sent an operator looking for a listener.
func TestAPortInTheEphemeralRangeIsSaidToBe(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no Linux port range here: %v", err)
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo < 2 {
		t.Fatalf("ip_local_port_range %q: %v", b, err)
	}
	inUse := &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	if got := ephemeralHint(fmt.Sprintf("127.0.0.1:%d", lo), inUse); !strings.Contains(got, "ip_local_port_range") {
		t.Errorf("port %d in %d-%d: hint %q; want the range named", lo, lo, hi, got)
	}
	if got := ephemeralHint(fmt.Sprintf("127.0.0.1:%d", lo-1), inUse); got != "" {
		t.Errorf("port %d below %d-%d: hint %q; want none", lo-1, lo, hi, got)
	}
	if got := ephemeralHint(fmt.Sprintf("127.0.0.1:%d", lo), os.ErrPermission); got != "" {
		t.Errorf("a bind refused for another reason: hint %q; want none", got)
	}
}
