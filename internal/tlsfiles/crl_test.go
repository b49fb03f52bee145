package tlsfiles_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/internal/tlsfiles"
)

// chainOf is the verified chain of a client certificate of p: the
// certificate, then p's CA.
func chainOf(t *testing.T, p *enginetest.PKI, c tls.Certificate) [][]*x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return [][]*x509.Certificate{{leaf, ca}}
}

// A CRL file that changes into something that is no list of client_ca's
// CA (a fetch cut short, another CA's list) leaves the lists loaded before
// in force, quietly while the file may still be being written and then
// at ERROR; a list that loads replaces them.
func TestACRLThatDoesNotLoadLeavesTheOneBeforeInForce(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	stolen := p.ClientCert(t, "stolen laptop")
	now := time.Now()
	crl := p.WriteCRL(t, filepath.Join(dir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(7 * 24 * time.Hour), Revoked: []tls.Certificate{stolen}})
	var logs bytes.Buffer
	crls, err := tlsfiles.LoadCRLs(tlsfiles.Endpoint{Kind: "inbound", Name: "adt_in"}, p.CAFile, []string{crl}, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	chain := chainOf(t, p, stolen)
	if r := crls.RevokedAt(chain, now); r == nil || r.CRL.Path != crl {
		t.Fatalf("a certificate the CRL lists: %+v; want it revoked by %s", r, crl)
	}
	if r := crls.RevokedAt(chainOf(t, p, p.Client), now); r != nil {
		t.Fatalf("a certificate the CRL does not list: revoked %+v", r)
	}

	enginetest.WriteFile(t, dir, "ca.crl", []byte("-----BEGIN X509 CRL-----\ncut sh"))
	at := time.Now().Add(2 * time.Second) // a look is due, the file just written
	if r := crls.RevokedAt(chain, at); r == nil {
		t.Fatal("a CRL file cut short took the revocations out; want the lists before kept")
	}
	if logs.Len() != 0 {
		t.Fatalf("logged while the file may still be being written: %s", logs.String())
	}
	if r := crls.RevokedAt(chain, at.Add(15*time.Second)); r == nil {
		t.Fatal("a CRL file cut short, left so: the revocations went; want the lists before kept")
	}
	if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), "still checking client certificates against the lists loaded before") {
		t.Fatalf("a CRL file left cut short is not logged at ERROR: %s", logs.String())
	}

	p.WriteCRL(t, crl, enginetest.CRL{Number: 2, ThisUpdate: now, NextUpdate: now.Add(7 * 24 * time.Hour), Stranger: true})
	if r := crls.RevokedAt(chain, at.Add(17*time.Second)); r == nil {
		t.Fatal("another CA's CRL took the revocations out; want the lists before kept")
	}
	p.WriteCRL(t, crl, enginetest.CRL{Number: 3, ThisUpdate: now, NextUpdate: now.Add(7 * 24 * time.Hour)})
	if r := crls.RevokedAt(chain, at.Add(19*time.Second)); r != nil {
		t.Fatalf("a CRL fetched again that no longer lists the certificate: still revoked by %+v", r)
	}
	if !strings.Contains(logs.String(), "changed CRLs loaded from disk") {
		t.Fatalf("the CRL loaded again is not logged: %s", logs.String())
	}
}

// A CRL past its next update is still enforced and is logged at WARN at
// the first look, then once an hour, not at each handshake.
func TestAStaleCRLIsWarnedOfOnceAnHour(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	stolen := p.ClientCert(t, "stolen laptop")
	now := time.Now()
	crl := p.WriteCRL(t, filepath.Join(dir, "ca.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-48 * time.Hour), NextUpdate: now.Add(-24 * time.Hour), Revoked: []tls.Certificate{stolen}})
	var logs bytes.Buffer
	crls, err := tlsfiles.LoadCRLs(tlsfiles.Endpoint{Kind: "inbound", Name: "adt_in"}, p.CAFile, []string{crl}, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	chain := chainOf(t, p, stolen)
	warns := func() int { return strings.Count(logs.String(), "the CRL's next update has passed") }
	for _, after := range []time.Duration{0, time.Second, 30 * time.Minute} {
		if r := crls.RevokedAt(chain, now.Add(after)); r == nil {
			t.Fatalf("%v on: a stale CRL no longer refuses what it lists", after)
		}
	}
	if warns() != 1 {
		t.Fatalf("%d WARN lines within the first hour; want 1:\n%s", warns(), logs.String())
	}
	crls.RevokedAt(chain, now.Add(61*time.Minute))
	if warns() != 2 {
		t.Fatalf("%d WARN lines after an hour; want 2:\n%s", warns(), logs.String())
	}
}
