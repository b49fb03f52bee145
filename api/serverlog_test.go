package api_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
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
	cfg, _ := tlsAPIConfig(t, enginetest.FreeAddr(t))
	var logs enginetest.LogBuffer
	s := api.New(api.Options{Config: cfg, Log: zerolog.New(&logs)})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
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
