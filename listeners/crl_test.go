package listeners_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

// crlConfig is tlsConfig with client_crl set to crls.
func crlConfig(addr string, p *enginetest.PKI, crls ...string) string {
	q := make([]string, len(crls))
	for i, c := range crls {
		q[i] = config.TOMLString(c)
	}
	return strings.Replace(tlsConfig(addr, p.ServerCert, p.ServerKey, p.CAFile), "client_ca =",
		"client_crl = ["+strings.Join(q, ", ")+"]\nclient_ca =", 1)
}

// serialOf is the serial number of c's certificate, as logs write it.
func serialOf(t *testing.T, c tls.Certificate) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

// warnLine is the last WARN line of logs that holds s, or "".
func warnLine(logs, s string) string {
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, s) {
			line = l
		}
	}
	return line
}

// A partner whose certificate its CA revoked (a laptop stolen, a partner
// offboarded) is refused at the handshake once the CA's CRL, in
// client_crl, lists it: counted as client_revoked and logged at WARN with
// the certificate's CN and serial. Another certificate of the same CA is
// admitted. Before client_crl, crypto/tls checked no CRL and the revoked
// certificate was admitted until it expired.
func TestMutualTLSRefusesARevokedClient(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	stolen, lab := p.ClientCert(t, "stolen laptop"), p.ClientCert(t, "lab")
	now := time.Now()
	crl := p.WriteCRL(t, filepath.Join(dir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(7 * 24 * time.Hour), Revoked: []tls.Certificate{stolen}})
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, crlConfig(addr, p, crl))
	revokedBefore, failedBefore := metricValue(handshakesFailed("client_revoked")), metricValue(handshakesFailed("failed"))

	client := func(c tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}
	}
	if code, err := sendTLS(t, addr, client(stolen)); err == nil {
		t.Fatalf("a client whose certificate the CA revoked: got %s; want the handshake refused", code)
	}
	if code, err := sendTLS(t, addr, client(lab)); err != nil || code != hl7.AA {
		t.Fatalf("a client of the same CA not revoked: %s, %v; want AA", code, err)
	}
	const refusal = "TLS handshake refused: the client's certificate is revoked"
	enginetest.WaitFor(t, "a WARN of the revoked client", 10*time.Second, func() bool {
		return warnLine(e.Logs.String(), refusal) != ""
	})
	line := warnLine(e.Logs.String(), refusal)
	for _, want := range []string{`"inbound":"secure_in"`, `"client_cn":"stolen laptop"`, `"client_serial":"` + serialOf(t, stolen) + `"`, crl} {
		if !strings.Contains(line, want) {
			t.Fatalf("the WARN of the revoked client does not hold %s: %s", want, line)
		}
	}
	if r, f := metricValue(handshakesFailed("client_revoked"))-revokedBefore, metricValue(handshakesFailed("failed"))-failedBefore; r != 1 || f != 0 {
		t.Fatalf("%s grew by %v and reason \"failed\" by %v for one revoked client; want 1 and 0", handshakesFailed("client_revoked"), r, f)
	}
	if g := metricValue(`mf_tls_crl_next_update_timestamp_seconds{kind="inbound",name="secure_in"}`); g != float64(now.Add(7*24*time.Hour).Unix()) {
		t.Fatalf("mf_tls_crl_next_update_timestamp_seconds is %v; want the CRL's next update, %d", g, now.Add(7*24*time.Hour).Unix())
	}
}

// A CRL updated on disk (a cron job that fetches the CA's list) is in force
// from the next handshakes, without a reload or a restart, on a resumed
// session too: a client admitted before its revocation is refused after
// it, and coming back with its session ticket does not let it in.
func TestAnUpdatedCRLIsInForceWithoutARestart(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	stolen, lab := p.ClientCert(t, "stolen laptop"), p.ClientCert(t, "lab")
	now := time.Now()
	crl := p.WriteCRL(t, filepath.Join(dir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(7 * 24 * time.Hour), PEM: true})
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, crlConfig(addr, p, crl))

	// The stolen laptop keeps its session, as a partner's TLS stack does.
	stolenCfg := &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{stolen}, MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	labCfg := &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{lab}, MinVersion: tls.VersionTLS12}
	for i := range 2 {
		code, resumed, err := sendTLSOnce(t, addr, stolenCfg)
		if err != nil || code != hl7.AA {
			t.Fatalf("before its revocation: %s, %v; want AA", code, err)
		}
		// The second connection resumes the first's session: the one
		// after the revocation offers its ticket.
		if resumed != (i == 1) {
			t.Fatalf("connection %d before the revocation resumed a session: %v; want %v", i+1, resumed, i == 1)
		}
	}
	p.WriteCRL(t, crl, enginetest.CRL{Number: 2, ThisUpdate: now, NextUpdate: now.Add(7 * 24 * time.Hour), Revoked: []tls.Certificate{stolen}})
	// The partner not revoked goes on sending meanwhile; its handshakes
	// (or the listener's look between them) load the new list.
	enginetest.WaitFor(t, "the new CRL loaded", 10*time.Second, func() bool {
		if code, _, err := sendTLSOnce(t, addr, labCfg); err != nil || code != hl7.AA {
			t.Fatalf("a client not revoked: %s, %v; want AA", code, err)
		}
		return strings.Contains(e.Logs.String(), "changed CRLs loaded from disk")
	})
	for i := range 2 {
		if code, _, err := sendTLSOnce(t, addr, stolenCfg); err == nil {
			t.Fatalf("after its revocation, connection %d (the first with its session ticket): got %s; want the handshake refused", i+1, code)
		}
	}
}

// MLLP connections stand for days: one a partner opened before its
// certificate was revoked is closed once the listener has loaded the CRL
// that revokes it (within a look, 5 s), logged at WARN with the
// certificate's CN and serial, and its reconnection is refused. Another
// partner's connection goes on.
func TestAConnectionOpenWhenItsCertificateIsRevokedIsClosed(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	stolen, lab := p.ClientCert(t, "stolen laptop"), p.ClientCert(t, "lab")
	now := time.Now()
	crl := p.WriteCRL(t, filepath.Join(dir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(7 * 24 * time.Hour)})
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, crlConfig(addr, p, crl))

	open := func(c tls.Certificate) (*tls.Conn, *enginetest.Client) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		cl := enginetest.Wrap(t, conn)
		if ack, err := cl.TrySend([]byte(adt("TLS1", "P1"))); err != nil || ack.Code != hl7.AA {
			t.Fatalf("before the revocation: %+v, %v; want AA", ack, err)
		}
		return conn, cl
	}
	stolenConn, _ := open(stolen)
	_, labClient := open(lab)

	p.WriteCRL(t, crl, enginetest.CRL{Number: 2, ThisUpdate: now, NextUpdate: now.Add(7 * 24 * time.Hour), Revoked: []tls.Certificate{stolen}})
	enginetest.WaitFor(t, "the revoked client's open connection closed", 15*time.Second, func() bool {
		stolenConn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := stolenConn.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	})
	const closed = "closed a connection whose client certificate a CRL loaded since revokes"
	enginetest.WaitFor(t, "a WARN of the connection closed", 10*time.Second, func() bool {
		return warnLine(e.Logs.String(), closed) != ""
	})
	line := warnLine(e.Logs.String(), closed)
	if !strings.Contains(line, `"client_cn":"stolen laptop"`) || !strings.Contains(line, `"client_serial":"`+serialOf(t, stolen)+`"`) {
		t.Fatalf("the WARN of the connection closed does not name the certificate: %q", line)
	}
	if ack, err := labClient.TrySend([]byte(adt("TLS2", "P1"))); err != nil || ack.Code != hl7.AA {
		t.Fatalf("the open connection of a client not revoked: %+v, %v; want AA", ack, err)
	}
}

// sendTLSOnce sends one message over a connection of its own, closed
// after, and returns its ACK code and whether the handshake resumed a
// session, or the error.
func sendTLSOnce(t *testing.T, addr string, cfg *tls.Config) (code hl7.AckCode, resumed bool, err error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", false, err
	}
	defer c.Close()
	ack, err := enginetest.Wrap(t, c).TrySend([]byte(adt("TLS1", "P1")))
	return ack.Code, c.ConnectionState().DidResume, err
}

// A CRL whose next update has passed (the job that fetches it broke) still
// refuses what it lists, and admits the rest (fail-open: a broken fetch
// must not stop every partner's feed); it is logged at WARN, saying to
// fetch the CA's current list, and its next update is in
// mf_tls_crl_next_update_timestamp_seconds, which MfCRLStale alerts on.
func TestAStaleCRLStillRefusesWhatItListsAndIsWarnedOf(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	stolen, lab := p.ClientCert(t, "stolen laptop"), p.ClientCert(t, "lab")
	now := time.Now()
	next := now.Add(-24 * time.Hour)
	crl := p.WriteCRL(t, filepath.Join(dir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-8 * 24 * time.Hour), NextUpdate: next, Revoked: []tls.Certificate{stolen}})
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, crlConfig(addr, p, crl))

	if code, err := sendTLS(t, addr, &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{stolen}, MinVersion: tls.VersionTLS12}); err == nil {
		t.Fatalf("a client a stale CRL revokes: got %s; want the handshake refused", code)
	}
	if code, err := sendTLS(t, addr, &tls.Config{RootCAs: p.Pool, Certificates: []tls.Certificate{lab}, MinVersion: tls.VersionTLS12}); err != nil || code != hl7.AA {
		t.Fatalf("a client a stale CRL does not list: %s, %v; want AA", code, err)
	}
	const stale = "the CRL's next update has passed"
	enginetest.WaitFor(t, "a WARN of the stale CRL", 10*time.Second, func() bool {
		return warnLine(e.Logs.String(), stale) != ""
	})
	if line := warnLine(e.Logs.String(), stale); !strings.Contains(line, crl) || !strings.Contains(line, `"inbound":"secure_in"`) {
		t.Fatalf("the WARN of the stale CRL names neither the file nor the inbound: %s", line)
	}
	if g := metricValue(`mf_tls_crl_next_update_timestamp_seconds{kind="inbound",name="secure_in"}`); g != float64(next.Unix()) {
		t.Fatalf("mf_tls_crl_next_update_timestamp_seconds is %v; want the stale CRL's next update, %d", g, next.Unix())
	}
}

// client_crl is refused at load without client_ca (no client certificate
// to check), naming a file that cannot be read or is no CRL, and holding a
// CRL that no CA of client_ca signed (it would revoke nothing mf admits,
// and is most likely the wrong CA's list).
func TestClientCRLIsCheckedAtLoad(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	now := time.Now()
	good := p.WriteCRL(t, filepath.Join(dir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(24 * time.Hour)})
	strangers := p.WriteCRL(t, filepath.Join(dir, "stranger.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(24 * time.Hour), Stranger: true})
	garbage := enginetest.WriteFile(t, dir, "garbage.crl", []byte("not a CRL\n"))
	certOnly := p.CAFile // a PEM file, of a certificate
	addr := "127.0.0.1:2575"
	if _, err := config.Parse([]byte(crlConfig(addr, p, good)), "site.toml"); err != nil {
		t.Fatalf("a CRL of client_ca's CA: %v", err)
	}
	// One out of date is not refused (see
	// TestAStaleCRLStillRefusesWhatItListsAndIsWarnedOf) but warned of, as
	// mf check and mf run's start say.
	stale := p.WriteCRL(t, filepath.Join(dir, "stale.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-48 * time.Hour), NextUpdate: now.Add(-24 * time.Hour)})
	c, err := config.Parse([]byte(crlConfig(addr, p, stale)), "site.toml")
	if err != nil {
		t.Fatalf("a CRL out of date: %v", err)
	}
	if w := strings.Join(c.Warnings(), "\n"); !strings.Contains(w, "inbound[0].client_crl: "+stale+": the CRL's next update has passed") {
		t.Fatalf("warnings of a config whose CRL is out of date:\n%s\nwant one naming inbound[0].client_crl and the file", w)
	}
	for name, c := range map[string]struct{ cfg, want string }{
		"without client_ca": {
			strings.Replace(crlConfig(addr, p, good), `client_ca = "`+p.CAFile+`"`, "", 1),
			"inbound[0].client_crl: needs client_ca"},
		"a file not there":  {crlConfig(addr, p, filepath.Join(dir, "missing.crl")), "missing.crl"},
		"no CRL":            {crlConfig(addr, p, garbage), "garbage.crl holds no CRL"},
		"a PEM certificate": {crlConfig(addr, p, certOnly), "holds no CRL"},
		"another CA's CRL":  {crlConfig(addr, p, good, strangers), "inbound[0].client_crl[1]: " + strangers + ": the CRL of \"someone else's CA\" is not signed by a CA of client_ca"},
	} {
		_, err := config.Parse([]byte(c.cfg), "site.toml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v; want an error holding %q", name, err, c.want)
		}
	}
}
