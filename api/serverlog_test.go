package api_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/api"
	"github.com/messagefoundry/mf/config"
)

// What Go's HTTP server reports itself (a failed TLS handshake here: a
// client that does not trust the API's certificate) goes to the node's log
// as a JSON line like every other, at WARN. Before, net/http wrote it with
// the standard library's logger: a plain-text line on stderr in the middle
// of the JSON log, which a log pipeline parsing JSON drops or chokes on.
func TestHTTPServerErrorsAreLoggedAsJSON(t *testing.T) {
	s, logs := startTLSAPI(t)
	// The system roots do not hold the test CA: the client refuses the
	// server's certificate and the server's handshake fails.
	c, err := tls.Dial("tcp", s.Addr(), &tls.Config{MinVersion: tls.VersionTLS12, ServerName: "localhost"})
	if err == nil {
		c.Close()
		t.Fatal("a client without the test CA completed the handshake")
	}
	var line map[string]any
	enginetest.WaitFor(t, "a JSON log line about the failed handshake", 10*time.Second, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "TLS handshake error") && json.Unmarshal([]byte(l), &line) == nil {
				return true
			}
		}
		return false
	})
	if line["level"] != "warn" {
		t.Fatalf("the handshake failure is logged %v, want at warn", line)
	}
}

// A failed handshake while the API's own certificate is out of its dates
// says so, naming tls_cert and the date: the line said only what the client
// sent back ("bad certificate"), which reads as the client's fault.
func TestAHandshakeRefusedForTheAPIsExpiredCertificateSaysSo(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	cert, key := p.ServerCertValid(t, dir, "expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	cfg, err := config.Parse([]byte("[api]\nlisten = \""+enginetest.FreeAddr(t)+"\"\ntls_cert = \""+cert+"\"\ntls_key = \""+key+"\"\n"), "tls.toml")
	if err != nil {
		t.Fatal(err)
	}
	var logs enginetest.LogBuffer
	s := api.New(api.Options{Config: cfg, Log: zerolog.New(&logs)})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	c, err := tls.Dial("tcp", s.Addr(), &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p.Pool})
	if err == nil {
		c.Close()
		t.Fatal("a client took an expired certificate")
	}
	var line string
	enginetest.WaitFor(t, "a log line about the failed handshake", 10*time.Second, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "TLS handshake error") {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(line, "the API's own certificate (tls_cert "+cert+") expired on ") {
		t.Fatalf("the line of a handshake refused for the API's expired certificate does not say so: %s", line)
	}
}

// Whoever reaches the API's port cannot fill the log with failed
// handshakes: a TCP check that closes with a reset (HAProxy's, every few
// seconds) is a DEBUG line, as one that closes cleanly (EOF) is, and any
// other failed handshake (plain HTTP sent to the HTTPS port, here) is a WARN
// at most once a minute, as a refused token is. Before, each was a WARN: 20
// resets and 5 plain requests wrote 25.
func TestFailedHandshakesDoNotFillTheLog(t *testing.T) {
	s, logs := startTLSAPI(t)
	const plain, resets = 5, 20
	for range plain {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: mf\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.ReadAll(c) // the server's 400, then its close
		c.Close()
	}
	for range resets {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetLinger(0) // the close sends a reset
		c.Close()
	}
	handshakeLines := func(level, of string) (n int) {
		for _, l := range strings.Split(logs.String(), "\n") {
			var line map[string]any
			if strings.Contains(l, "TLS handshake error") && strings.Contains(l, of) && json.Unmarshal([]byte(l), &line) == nil && (level == "" || line["level"] == level) {
				n++
			}
		}
		return n
	}
	// The plain requests came first, and their lines before their
	// connections' close: logged, if at all, by the time the resets are.
	const reset = "connection reset by peer"
	enginetest.WaitFor(t, "a line for each reset", 10*time.Second, func() bool {
		return handshakeLines("", reset) >= resets
	})
	if n := handshakeLines("debug", reset); n != resets {
		t.Errorf("%d of %d resets before the handshake logged at DEBUG, want all", n, resets)
	}
	if n := handshakeLines("warn", ""); n != 1 {
		t.Fatalf("%d resets and %d plain HTTP requests wrote %d WARN lines about failed handshakes, want 1 (the first plain request's; the resets at DEBUG, the rest counted for the next line):\n%s", resets, plain, n, logs.String())
	}
}

// startTLSAPI starts an API over TLS on a free port, logging to the buffer
// it returns, and stops it when the test ends.
func startTLSAPI(t *testing.T) (*api.Server, *enginetest.LogBuffer) {
	t.Helper()
	cfg, _ := tlsAPIConfig(t, enginetest.FreeAddr(t))
	logs := &enginetest.LogBuffer{}
	s := api.New(api.Options{Config: cfg, Log: zerolog.New(logs)})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return s, logs
}
