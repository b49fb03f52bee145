package api_test

import (
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
