package listeners_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
)

// pki is a throwaway certificate authority with a server and a client
// certificate, written as PEM files.
type pki struct {
	caFile, serverCert, serverKey string
	pool                          *x509.CertPool
	client                        tls.Certificate
	strangerClient                tls.Certificate // signed by another CA
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	caCert, caKey := selfSignedCA(t, "mf test CA")
	p := &pki{pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	p.caFile = enginetest.WriteFile(t, dir, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}))

	srvDER, srvKey := leaf(t, caCert, caKey, "mf server", x509.ExtKeyUsageServerAuth)
	p.serverCert = enginetest.WriteFile(t, dir, "server.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}))
	p.serverKey = enginetest.WriteFile(t, dir, "server.key", keyPEM(t, srvKey))

	cliDER, cliKey := leaf(t, caCert, caKey, "partner", x509.ExtKeyUsageClientAuth)
	p.client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}

	otherCA, otherKey := selfSignedCA(t, "someone else's CA")
	strDER, strKey := leaf(t, otherCA, otherKey, "stranger", x509.ExtKeyUsageClientAuth)
	p.strangerClient = tls.Certificate{Certificate: [][]byte{strDER}, PrivateKey: strKey}
	return p
}

func selfSignedCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func leaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func keyPEM(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b})
}

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
	p := newPKI(t, dir)
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, tlsConfig(addr, p.serverCert, p.serverKey, ""))

	if code, err := sendTLS(t, addr, &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}); err != nil || code != hl7.AA {
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
	p := newPKI(t, dir)
	addr := enginetest.FreeAddr(t)
	enginetest.Start(t, tlsConfig(addr, p.serverCert, p.serverKey, p.caFile))

	ok := &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}, MinVersion: tls.VersionTLS12}
	if code, err := sendTLS(t, addr, ok); err != nil || code != hl7.AA {
		t.Fatalf("with a client certificate from the trusted CA: %s, %v; want AA", code, err)
	}
	for name, cfg := range map[string]*tls.Config{
		"no client certificate":       {RootCAs: p.pool, MinVersion: tls.VersionTLS12},
		"a certificate of another CA": {RootCAs: p.pool, Certificates: []tls.Certificate{p.strangerClient}, MinVersion: tls.VersionTLS12},
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
