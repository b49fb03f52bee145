package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/api"
)

// serve runs s on a free loopback port (the real *http.Server and its
// limits, not httptest's) and returns its address.
func serve(t *testing.T, v *env, build func(api.Options) *api.Server) string {
	t.Helper()
	c := *v.e.Config
	c.API.Listen = "127.0.0.1:0"
	s := build(api.Options{Config: &c, Store: v.e.Store, Status: v.e.Status, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s.Addr()
}

// A client that sends headers announcing a body and then nothing is let go
// once the read limit passes: before, net/http's read of the announced body
// (to keep the connection) had no deadline, and such a client, with no
// token, held a connection, a goroutine and a file descriptor for good.
// The limits are divided by 100 here (a read limit of 150 ms).
func TestStalledBodyIsLetGo(t *testing.T) {
	v := start(t, fileOutbound)
	addr := serve(t, v, func(o api.Options) *api.Server { return api.NewWithLimitsDividedBy(o, 100) })
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /config/reload HTTP/1.1\r\nHost: mf\r\nContent-Length: 100000\r\n\r\n")
	// The server lets go by closing the connection, after an answer or
	// not; waiting for that is bounded far above the 150 ms limit.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection is still open 30 s after headers announcing a body that never came (read limit 150 ms); read so far %q", got)
	}
	status, _, _ := strings.Cut(string(got), "\r\n")
	t.Logf("the server let go: %q, %v", status, err)
}

// Headers over 64 KiB are refused (431) before any handler runs; net/http's
// own default let 1 MiB through.
func TestLargeHeadersRefused(t *testing.T) {
	v := start(t, fileOutbound)
	addr := serve(t, v, api.New)
	req, _ := http.NewRequest("GET", "http://"+addr+"/health", nil)
	req.Header.Set("X-Filler", strings.Repeat("x", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("GET /health with 100 KiB of headers: %d, want 431", resp.StatusCode)
	}
}

// The API holds a bounded number of connections: before, every client that
// connected, with no token, held a connection, a goroutine and a file
// descriptor of the process's one limit until a timeout let it go (idle
// keep-alive connections for 2 minutes), and 20,000 of them took every
// descriptor: the MLLP listeners then closed each partner's connection at
// once. Beyond the bound, a connection that no idle one, nor one silent
// for over a second, can make way for is closed at once.
func TestConnectionsAreBounded(t *testing.T) {
	const max = 4
	v := start(t, fileOutbound)
	addr := serve(t, v, func(o api.Options) *api.Server { return api.NewWithMaxConnections(o, max) })
	// Connections that send nothing yet: none is idle, none can make way.
	held := dialSilent(t, addr, max)
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection beyond the %d the API may hold is still open after 5 s", max)
	}
	// One let go makes room again.
	held[0].Close()
	if got, ok := healthWithin(t, addr, 10*time.Second, 20*time.Millisecond); !ok {
		t.Fatalf("no room for a connection 10 s after one of %d was closed: %q", max, got)
	}
}

// At the bound, a kept-alive connection idle between requests makes way for
// a new one: clients that asked once and keep their connections cannot
// lock out the next (a load balancer's check, a scrape).
func TestIdleConnectionsMakeWayAtTheBound(t *testing.T) {
	const max = 4
	v := start(t, fileOutbound)
	addr := serve(t, v, func(o api.Options) *api.Server { return api.NewWithMaxConnections(o, max) })
	get := func(c net.Conn) string {
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: mf\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		return resp.Status
	}
	for i := range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := get(c); got != "200 OK" {
			t.Fatalf("kept-alive connection %d: %s", i, got)
		}
	}
	// The server marks a connection idle once it has written the answer;
	// a client may read it first, so the new connection may come before.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		got := get(c)
		c.Close()
		if got == "200 OK" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new connection, with %d idle ones open: %s; want 200 OK (an idle one closed for it)", max, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// At the bound, a connection that has waited over a second without sending
// its first request makes way for a new one, the oldest first: before, only
// an idle kept-alive connection could, and each silent connection held its
// place for the whole header timeout (10 s), so about 410 new connections a
// second that send nothing locked out every client, /health and /ready
// included (a load balancer then marks the node down).
func TestSilentConnectionsMakeWayAtTheBound(t *testing.T) {
	const max = 4
	v := start(t, fileOutbound)
	addr := serve(t, v, func(o api.Options) *api.Server { return api.NewWithMaxConnections(o, max) })
	held := dialSilent(t, addr, max)
	// Well within the header timeout, which would let them go anyway.
	start := time.Now()
	if got, ok := healthWithin(t, addr, 5*time.Second, 50*time.Millisecond); !ok {
		t.Fatalf("no room for a new connection 5 s after %d connections that send nothing took every place: %q; want the oldest closed for it once it has waited a second", max, got)
	}
	t.Logf("a new connection was served %v after the silent ones were opened", time.Since(start).Round(time.Millisecond))
	// The one closed is the oldest.
	held[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := held[0].Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the oldest silent connection is still open: another made way")
	}
}

// A connection that has begun sending its request (or its TLS handshake)
// is not closed to make way, however slow: net/http says a request began
// only once its headers are whole, and a client still sending them a
// second after it connected was cut (a review of d3cdcb4).
func TestAConnectionSendingItsRequestDoesNotMakeWay(t *testing.T) {
	v := start(t, fileOutbound)
	addr := serve(t, v, func(o api.Options) *api.Server { return api.NewWithMaxConnections(o, 1) })
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "GET /health HTTP/1.1\r\nHost: mf\r\n")
	// Past the grace, so that only its first bytes keep its place.
	time.Sleep(1200 * time.Millisecond)
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	extra.SetReadDeadline(time.Now().Add(2 * time.Second))
	extra.Read(make([]byte, 1)) // closed at once: no room
	extra.Close()
	fmt.Fprintf(slow, "Connection: close\r\n\r\n")
	slow.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(slow)
	if !strings.HasPrefix(string(got), "HTTP/1.1 200") {
		t.Fatalf("the connection that was sending its request got %q; want its answer, not closed to make way", got)
	}
}

// dialSilent opens n connections to addr that send nothing, closed when the
// test ends.
func dialSilent(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var held []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		held = append(held, c)
	}
	return held
}

// healthWithin asks GET /health on a new connection to addr every pause
// until it is answered 200 or within has passed; it returns the last
// answer and whether it was the 200.
func healthWithin(t *testing.T, addr string, within, pause time.Duration) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: mf\r\nConnection: close\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if strings.HasPrefix(string(got), "HTTP/1.1 200") {
			return string(got), true
		}
		if time.Now().After(deadline) {
			return string(got), false
		}
		time.Sleep(pause)
	}
}
