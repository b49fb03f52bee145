package listeners_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

func tlsConfig(listen, cert, key, clientCA string) string {
	return `
[[inbound]]
name = "secure_in"
type = "mllp"
listen = "` + listen + `"
tls_cert = "` + cert + `"
tls_key = "` + key + `"
client_ca = "` + clientCA + `"

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "secure_in"
to = ["out"]
`
}

// sendTLS sends one message over TLS and returns its ACK code, or the error.
func sendTLS(t *testing.T, addr string, cfg *tls.Config) (hl7.AckCode, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	ack, err := enginetest.Wrap(t, c).TrySend([]byte(adt("TLS1", "P1")))
	return ack.Code, err
}

func TestMLLPOverTLS(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, tlsConfig(addr, p.ServerCert, p.ServerKey, ""))

	if code, err := sendTLS(t, addr, &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}); err != nil || code != hl7.AA {
		t.Fatalf("over TLS: %s, %v; want AA", code, err)
	}
	// A plaintext sender gets no ACK: its bytes are not a TLS handshake.
	cl := dial(t, addr)
	if ack, err := cl.TrySend([]byte(adt("PLAIN", "P1"))); err == nil {
		t.Fatalf("a plaintext sender got an ACK from a TLS listener: %+v", ack)
	}
}

func TestMLLPOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, tlsConfig(addr, p.ServerCert, p.ServerKey, p.CAFile))

	ok := &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{p.Client}, MinVersion: tls.VersionTLS12}
	if code, err := sendTLS(t, addr, ok); err != nil || code != hl7.AA {
		t.Fatalf("with a client certificate from the trusted CA: %s, %v; want AA", code, err)
	}
	for name, cfg := range map[string]*tls.Config{
		"no client certificate":       {RootCAs: p.Pool, MinVersion: tls.VersionTLS12},
		"a certificate of another CA": {RootCAs: p.Pool, Certificates: []tls.Certificate{p.StrangerClient}, MinVersion: tls.VersionTLS12},
	} {
		if code, err := sendTLS(t, addr, cfg); err == nil {
			t.Fatalf("%s: got %s; want the handshake refused", name, code)
		}
	}
}

// A listener on a non-loopback address without TLS is refused at load, with
// an error naming the file and the key; allow_plaintext lets it through.
func TestPlaintextNonLoopbackRefusedAtLoad(t *testing.T) {
	cfg := `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "0.0.0.0:2575"
`
	_, err := config.Parse([]byte(cfg), "site.toml")
	if err == nil || !strings.Contains(err.Error(), "site.toml") || !strings.Contains(err.Error(), "inbound[0].listen") ||
		!strings.Contains(err.Error(), "allow_plaintext") {
		t.Fatalf("got %v; want a refusal naming site.toml, inbound[0].listen and allow_plaintext", err)
	}
	if _, err := config.Parse([]byte(cfg+"allow_plaintext = true\n"), "site.toml"); err != nil {
		t.Fatalf("with allow_plaintext = true: %v", err)
	}
}

// Over TLS too, a sender still writing an oversize frame reads its AR (see
// TestARefusedFrameIsAnsweredNotReset), then the end of the stream.
func TestARefusedFrameIsAnsweredNotResetOverTLS(t *testing.T) {
	p := enginetest.NewPKI(t, t.TempDir())
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, strings.Replace(tlsConfig(addr, p.ServerCert, p.ServerKey, ""), `client_ca = ""`, "max_message_bytes = 1024", 1))
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	cl := enginetest.Wrap(t, c)
	big, _ := hl7.AppendFrame(nil, []byte(adt("BIG", "P1")+"OBX|1|ED|PDF^Report||"+strings.Repeat("x", 32<<20)+"\r"))
	ack, err := cl.Raw(big)
	if err != nil || ack.Code != hl7.AR || !strings.Contains(ack.Text, "larger than 1024 bytes") {
		t.Fatalf("oversize frame over TLS: %+v, %v; want the AR saying it is larger than 1024 bytes", ack, err)
	}
	if !cl.Closed() {
		t.Fatal("connection still open after an oversize frame")
	}
}

// A load balancer's TCP check of a TLS listener (connect, then close, or
// reset) ends before any handshake: it is no failure worth a WARN. Each
// was one, "TLS handshake failed", so the documented MLLP VIP check (every
// second, from each HAProxy) wrote 3,600 WARN lines an hour on the primary.
// A real handshake failure (a client without the certificate the listener
// asks for) is still a WARN.
func TestTCPChecksOfATLSListenerAreNotWarnings(t *testing.T) {
	p := enginetest.NewPKI(t, t.TempDir())
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, tlsConfig(addr, p.ServerCert, p.ServerKey, p.CAFile))
	failedBefore := metricValue(handshakesFailed("failed"))
	const probes = 40
	for i := range probes {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		if i%2 == 1 {
			c.(*net.TCPConn).SetLinger(0) // closed with a reset, as HAProxy's checks are
		}
		c.Close()
	}
	enginetest.WaitFor(t, "every probe's handshake to end", 10*time.Second, func() bool {
		return strings.Count(e.Logs.String(), "TLS handshake") >= probes
	})
	if n := strings.Count(e.Logs.String(), `"level":"warn"`); n > 0 {
		t.Fatalf("%d WARN lines for %d TCP checks:\n%s", n, probes, lastLines(e.Logs.String(), 4))
	}
	if _, err := sendTLS(t, addr, &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("a client without a certificate was let in")
	}
	enginetest.WaitFor(t, "a WARN for the client without a certificate", 10*time.Second, func() bool {
		return strings.Count(e.Logs.String(), `"level":"warn"`) == 1
	})
	// Counted once: the client without a certificate, not the probes.
	if n := metricValue(handshakesFailed("failed")) - failedBefore; n != 1 {
		t.Fatalf("%s grew by %v for %d TCP checks and one client without a certificate; want 1", handshakesFailed("failed"), n, probes)
	}
}

// A connection to a TLS listener that never starts its handshake (a stuck
// client, a port scan that holds the socket) is closed at read_timeout, as
// a plaintext one stalled mid-frame is: otherwise each holds one of the
// listener's max_connections for good.
func TestAConnectionThatNeverHandshakesIsClosedAtTheReadTimeout(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, strings.Replace(tlsConfig(addr, p.ServerCert, p.ServerKey, ""), `client_ca = ""`, "read_timeout_seconds = 0.5", 1))
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if took := time.Since(start); err == nil || took > 5*time.Second {
		t.Fatalf("a silent TLS connection: read %v after %v; want it closed at read_timeout (0.5 s)", err, took)
	}
}

// A clean stop cuts a handshake still waiting for its client at once, and
// it is no failure of the client's: it was counted under
// mf_tls_handshakes_failed_total{reason="failed"}, which drives an alert,
// and logged at WARN to check the sender's certificate, at every
// switchover.
func TestAStopCutsAHandshakeInWaitingWithoutCountingAFailure(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, tlsConfig(addr, p.ServerCert, p.ServerKey, ""))
	failedBefore := metricValue(handshakesFailed("failed"))
	raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// The client reads the server's first flight, then never answers it:
	// the server's handshake waits for the client's Finished.
	stalled := &stallAfterFirstRead{Conn: raw, first: make(chan struct{}), closed: make(chan struct{})}
	go tls.Client(stalled, &tls.Config{RootCAs: p.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}).Handshake()
	select {
	case <-stalled.first:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never answered the client's hello")
	}
	select {
	case <-e.Stop():
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not stop")
	}
	select {
	case <-stalled.closed: // the server's connection goroutine has ended
	case <-time.After(10 * time.Second):
		t.Fatal("the server kept the connection after its stop")
	}
	if n := metricValue(handshakesFailed("failed")) - failedBefore; n != 0 {
		t.Errorf("%s grew by %v for a handshake a stop cut; want 0", handshakesFailed("failed"), n)
	}
	if logs := e.Logs.String(); strings.Contains(logs, "TLS handshake failed") || strings.Contains(logs, "grace ran out") {
		t.Errorf("a stop with a handshake in waiting logged a failure:\n%s", lastLines(logs, 6))
	}
}

// stallAfterFirstRead hands its TLS client the first bytes the server
// sends (first is closed then), and nothing more: later reads drain the
// connection until the server closes it (closed), then fail.
type stallAfterFirstRead struct {
	net.Conn
	first, closed chan struct{}
	n             int
}

func (s *stallAfterFirstRead) Read(b []byte) (int, error) {
	if s.n++; s.n == 1 {
		n, err := s.Conn.Read(b)
		close(s.first)
		return n, err
	}
	_, err := io.Copy(io.Discard, s.Conn)
	close(s.closed)
	if err == nil {
		err = io.EOF
	}
	return 0, err
}

// When a handshake fails while the listener's own certificate is out of
// its dates, the WARN says so, naming tls_cert and the date: it said to
// check the sender's certificate, and the sender only refused an expired
// one of the listener's.
func TestAHandshakeRefusedForTheListenersExpiredCertificateSaysSo(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	cert, key := p.ServerCertValid(t, dir, "expired", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, tlsConfig(addr, cert, key, ""))
	if _, err := sendTLS(t, addr, &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("a client took an expired certificate")
	}
	enginetest.WaitFor(t, "a WARN of the failed handshake", 10*time.Second, func() bool {
		return strings.Contains(e.Logs.String(), "TLS handshake failed")
	})
	var line string
	for _, l := range strings.Split(e.Logs.String(), "\n") {
		if strings.Contains(l, "TLS handshake failed") {
			line = l
		}
	}
	if !strings.Contains(line, "this listener's own certificate (tls_cert "+cert+") expired on ") {
		t.Fatalf("the WARN of a handshake refused for the listener's expired certificate does not say so: %s", line)
	}
}

// tls_client_names admits, of the clients the CA signed, only those whose
// certificate carries a listed name: a DNS name (subject alternative name)
// when it has any, else its subject CN. Each refused partner is logged at
// WARN, with the names it presented, once a minute per address: a partner
// set up wrong reconnects every few seconds.
func TestMutualTLSAdmitsOnlyTheListedClientNames(t *testing.T) {
	p := enginetest.NewPKI(t, t.TempDir())
	addr := enginetest.FreeAddr(t)
	cfg := strings.Replace(tlsConfig(addr, p.ServerCert, p.ServerKey, p.CAFile), "client_ca =",
		`tls_client_names = ["lab.example.org", "partner"]`+"\nclient_ca =", 1)
	e := enginetest.Start(t, cfg)
	notListedBefore, failedBefore := metricValue(handshakesFailed("client_not_listed")), metricValue(handshakesFailed("failed"))
	client := func(c tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}
	}
	for name, c := range map[string]tls.Certificate{
		"a listed DNS name":               p.ClientCert(t, "lab server", "LAB.example.org"),
		"a listed CN and no DNS name":     p.Client,
		"a listed DNS name among several": p.ClientCert(t, "lab server", "lab.internal", "lab.example.org"),
	} {
		if code, err := sendTLS(t, addr, client(c)); err != nil || code != hl7.AA {
			t.Errorf("%s: %s, %v; want AA", name, code, err)
		}
	}
	// Its CN is listed, but a certificate with DNS names is known by those.
	refused := client(p.ClientCert(t, "partner", "pharmacy.example.org"))
	for range 3 {
		if code, err := sendTLS(t, addr, refused); err == nil {
			t.Fatalf("a client whose certificate names pharmacy.example.org only: got %s; want the handshake refused", code)
		}
	}
	if code, err := sendTLS(t, addr, client(p.ClientCert(t, "billing"))); err == nil {
		t.Fatalf("a client whose certificate's CN is billing: got %s; want the handshake refused", code)
	}
	const refusal = "TLS handshake refused: the client's certificate carries none of this inbound's tls_client_names"
	enginetest.WaitFor(t, "a line for each of the four refusals", 10*time.Second, func() bool {
		return strings.Count(e.Logs.String(), refusal) == 4
	})
	var warns []string
	for _, l := range strings.Split(e.Logs.String(), "\n") {
		if strings.Contains(l, `"level":"warn"`) {
			warns = append(warns, l)
		}
	}
	// One WARN for the four refusals from 127.0.0.1, the first's; the
	// others at DEBUG.
	if len(warns) != 1 || !strings.Contains(warns[0], refusal) || !strings.Contains(warns[0], `"client_names":["pharmacy.example.org"]`) {
		t.Fatalf("WARN lines for the refused clients:\n%s\nwant one, naming pharmacy.example.org and tls_client_names", strings.Join(warns, "\n"))
	}
	// Each refusal is counted, logged or not: an alert sees a partner
	// refused for good, which one WARN a minute does not tell a dashboard.
	if n, f := metricValue(handshakesFailed("client_not_listed"))-notListedBefore, metricValue(handshakesFailed("failed"))-failedBefore; n != 4 || f != 0 {
		t.Fatalf("%s grew by %v and reason \"failed\" by %v for four clients not listed; want 4 and 0", handshakesFailed("client_not_listed"), n, f)
	}
}

// handshakesFailed names the series of the TLS handshakes of secure_in that
// failed for reason.
func handshakesFailed(reason string) string {
	return `mf_tls_handshakes_failed_total{inbound="secure_in",reason="` + reason + `"}`
}

// served dials the listener at addr over TLS and returns the certificate it
// presents, having sent a message on the connection and had it accepted.
func served(t *testing.T, addr string, cfg *tls.Config) *x509.Certificate {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close() // a test asks many times: within max_connections
	cert := c.ConnectionState().PeerCertificates[0]
	if ack, err := enginetest.Wrap(t, c).TrySend([]byte(adt("TLS1", "P1"))); err != nil || ack.Code != hl7.AA {
		t.Fatalf("over TLS: %+v, %v; want AA", ack, err)
	}
	return cert
}

// A certificate renewed on disk (certbot, a PKI agent: both replace
// tls_cert and tls_key) is what the next handshake presents, without a
// reload or a restart, and mf_tls_cert_expiry_timestamp_seconds moves to
// its expiry; a connection open from before goes on. The listener read its
// files at start only, and served the old certificate until it expired.
func TestARenewedCertificateIsServedWithoutAReload(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	now := time.Now().Truncate(time.Second)
	cert, key := p.ServerCertValid(t, dir, "renewed", now.Add(-time.Hour), now.Add(20*24*time.Hour))
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, strings.ReplaceAll(tlsConfig(addr, cert, key, ""), "secure_in", "renewed_in"))
	client := &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}
	const series = `mf_tls_cert_expiry_timestamp_seconds{kind="inbound",name="renewed_in"}`
	first := served(t, addr, client)
	if !first.NotAfter.Equal(now.Add(20*24*time.Hour)) || metricValue(series) != float64(first.NotAfter.Unix()) {
		t.Fatalf("before the renewal: served a certificate expiring %v, %s at %v", first.NotAfter, series, metricValue(series))
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, client)
	if err != nil {
		t.Fatal(err)
	}
	open := enginetest.Wrap(t, c)

	p.ServerCertValid(t, dir, "renewed", now.Add(-time.Hour), now.Add(90*24*time.Hour))
	var got *x509.Certificate
	enginetest.WaitFor(t, "a handshake presenting the renewed certificate", 10*time.Second, func() bool {
		got = served(t, addr, client)
		return got.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	if !got.NotAfter.Equal(now.Add(90 * 24 * time.Hour)) {
		t.Fatalf("the certificate served after the renewal expires %v; want the renewed one's %v", got.NotAfter, now.Add(90*24*time.Hour))
	}
	if v := metricValue(series); v != float64(got.NotAfter.Unix()) {
		t.Fatalf("after the renewal %s is %v; want the renewed certificate's expiry %d", series, v, got.NotAfter.Unix())
	}
	if ack := open.Send(adt("OPEN", "P1")); ack.Code != hl7.AA {
		t.Fatalf("a connection open from before the renewal: %s; want AA", ack.Code)
	}
	if !strings.Contains(e.Logs.String(), "renewed TLS certificate loaded from disk") {
		t.Fatal("no line tells of the renewed certificate")
	}
}

// A renewal that left tls_cert and tls_key not a pair (the certificate of
// another key) does not take the listener down: it goes on presenting the
// certificate it had, says at ERROR what is wrong and what to do, and takes
// the renewal once the files are mended.
func TestABrokenRenewalKeepsTheCertificateInServiceAndSaysSo(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, tlsConfig(addr, p.ServerCert, p.ServerKey, ""))
	client := &tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}
	first := served(t, addr, client)

	renewed, renewedKey := p.ServerCertValid(t, t.TempDir(), "renewed", time.Now().Add(-time.Hour), time.Now().Add(90*24*time.Hour))
	enginetest.CopyFile(t, renewed, p.ServerCert) // the key is not renewed yet
	// Left so past the time a renewal takes to write both files.
	old := time.Now().Add(-time.Minute)
	for _, f := range []string{p.ServerCert, p.ServerKey} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	const broken = "the TLS certificate or key changed on disk but the new pair cannot be used; still serving the certificate loaded before"
	enginetest.WaitFor(t, "an ERROR saying the renewed files cannot be used", 10*time.Second, func() bool {
		if got := served(t, addr, client); got.SerialNumber.Cmp(first.SerialNumber) != 0 {
			t.Fatalf("the listener presents serial %v, of a certificate whose key it does not hold", got.SerialNumber)
		}
		return strings.Contains(e.Logs.String(), broken)
	})
	line := grep(e.Logs.String(), broken)
	if !strings.Contains(line, `"level":"error"`) || !strings.Contains(line, "private key does not match public key") || !strings.Contains(line, p.ServerCert) {
		t.Fatalf("the line of the broken renewal: %s\nwant an ERROR naming the file and the mismatch", line)
	}

	enginetest.CopyFile(t, renewedKey, p.ServerKey)
	enginetest.WaitFor(t, "a handshake presenting the renewed certificate", 10*time.Second, func() bool {
		return served(t, addr, client).SerialNumber.Cmp(first.SerialNumber) != 0
	})
}

// A CA added to client_ca (a partner whose certificates a new CA signs)
// verifies its clients from the next handshake on, without a reload.
func TestAClientCABundleChangedOnDiskIsVerifiedWith(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	newCA := enginetest.NewPKI(t, t.TempDir())
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, tlsConfig(addr, p.ServerCert, p.ServerKey, p.CAFile))
	client := &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{newCA.Client}, MinVersion: tls.VersionTLS12}
	if code, err := sendTLS(t, addr, client); err == nil {
		t.Fatalf("a client of a CA not in client_ca: %s; want the handshake refused", code)
	}
	bundle, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	added, err := os.ReadFile(newCA.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	enginetest.WriteFile(t, dir, "ca.pem", append(bundle, added...))
	enginetest.WaitFor(t, "the client of the added CA accepted", 10*time.Second, func() bool {
		code, err := sendTLS(t, addr, client)
		return err == nil && code == hl7.AA
	})
}

// MLLP connections stand for days, and a listener or a destination with no
// handshake meanwhile never looked at its files: the expiry series kept the
// old certificate's date after a renewal, and the expiry alerts fired on a
// node whose next handshake would present the renewed one. Both look every
// few seconds between handshakes.
func TestTheExpirySeriesFollowsARenewalBetweenHandshakes(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	now := time.Now().Truncate(time.Second)
	inCert, inKey := p.ServerCertValid(t, dir, "in", now.Add(-time.Hour), now.Add(20*24*time.Hour))
	outCert, outKey := p.ServerCertValid(t, dir, "out", now.Add(-time.Hour), now.Add(25*24*time.Hour))
	enginetest.Start(t, `
[[inbound]]
name = "idle_in"
type = "mllp"
listen = "`+enginetest.FreeAddr(t)+`"
tls_cert = "`+inCert+`"
tls_key = "`+inKey+`"

[[outbound]]
name = "idle_out"
type = "mllp"
address = "127.0.0.1:1"
tls = true
tls_cert = "`+outCert+`"
tls_key = "`+outKey+`"

[[route]]
from = "idle_in"
to = ["idle_out"]
`)
	series := map[string]struct {
		file  string
		start time.Time
	}{
		`mf_tls_cert_expiry_timestamp_seconds{kind="inbound",name="idle_in"}`:   {"in", now.Add(20 * 24 * time.Hour)},
		`mf_tls_cert_expiry_timestamp_seconds{kind="outbound",name="idle_out"}`: {"out", now.Add(25 * 24 * time.Hour)},
	}
	for s, c := range series {
		if v := metricValue(s); v != float64(c.start.Unix()) {
			t.Fatalf("at start %s is %v; want the expiry of %s.pem, %d", s, v, c.file, c.start.Unix())
		}
		p.ServerCertValid(t, dir, c.file, now.Add(-time.Hour), now.Add(90*24*time.Hour))
	}
	for s := range series {
		enginetest.WaitFor(t, s+" at the renewed certificate's expiry", 20*time.Second, func() bool {
			return metricValue(s) == float64(now.Add(90*24*time.Hour).Unix())
		})
	}
}
