package enginetest

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
	"os"
	"testing"
	"time"
)

// PKI is a throwaway certificate authority with a server certificate (for
// 127.0.0.1) and a client certificate, written as PEM files in a directory.
type PKI struct {
	CAFile, ServerCert, ServerKey string
	Pool                          *x509.CertPool
	Client                        tls.Certificate
	StrangerClient                tls.Certificate // signed by another CA

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	// The other CA's, which signed StrangerClient.
	strangerCA  *x509.Certificate
	strangerKey *ecdsa.PrivateKey
}

// validFor is how long the PKI's certificates are valid: a year, so that no
// test config draws the warning of a certificate about to expire.
const validFor = 365 * 24 * time.Hour

// NewPKI makes the certificates in dir.
func NewPKI(t testing.TB, dir string) *PKI {
	t.Helper()
	caCert, caKey := selfSignedCA(t, "mf test CA")
	p := &PKI{Pool: x509.NewCertPool(), caCert: caCert, caKey: caKey}
	p.Pool.AddCert(caCert)
	p.CAFile = WriteFile(t, dir, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}))

	srvDER, srvKey := leaf(t, caCert, caKey, "mf server", x509.ExtKeyUsageServerAuth, time.Now().Add(-time.Hour), time.Now().Add(validFor))
	p.ServerCert = WriteFile(t, dir, "server.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}))
	p.ServerKey = WriteFile(t, dir, "server.key", keyPEM(t, srvKey))

	cliDER, cliKey := leaf(t, caCert, caKey, "partner", x509.ExtKeyUsageClientAuth, time.Now().Add(-time.Hour), time.Now().Add(validFor))
	p.Client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}

	otherCA, otherKey := selfSignedCA(t, "someone else's CA")
	strDER, strKey := leaf(t, otherCA, otherKey, "stranger", x509.ExtKeyUsageClientAuth, time.Now().Add(-time.Hour), time.Now().Add(validFor))
	p.StrangerClient = tls.Certificate{Certificate: [][]byte{strDER}, PrivateKey: strKey}
	p.strangerCA, p.strangerKey = otherCA, otherKey
	return p
}

// ClientCert issues a client certificate of the PKI's CA with subject CN cn
// and the DNS names (subject alternative names) given, for tests of
// which client identities a listener admits.
func (p *PKI) ClientCert(t testing.TB, cn string, dnsNames ...string) tls.Certificate {
	t.Helper()
	der, k := leaf(t, p.caCert, p.caKey, cn, x509.ExtKeyUsageClientAuth, time.Now().Add(-time.Hour), time.Now().Add(validFor), dnsNames...)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
}

// ServerCertValid writes in dir a server certificate of the PKI's CA (for
// 127.0.0.1), valid from notBefore to notAfter, as name.pem and its key as
// name.key, and returns the two files.
func (p *PKI) ServerCertValid(t testing.TB, dir, name string, notBefore, notAfter time.Time) (cert, key string) {
	t.Helper()
	der, k := leaf(t, p.caCert, p.caKey, name, x509.ExtKeyUsageServerAuth, notBefore, notAfter)
	return WriteFile(t, dir, name+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), WriteFile(t, dir, name+".key", keyPEM(t, k))
}

func selfSignedCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validFor),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
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

func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage, notBefore, notAfter time.Time, dnsNames ...string) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: dnsNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func keyPEM(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b})
}

// CRL is a certificate revocation list for tests of client_crl: Number
// orders the lists of one CA, and a list is current from ThisUpdate to
// NextUpdate.
type CRL struct {
	Number                 int64
	ThisUpdate, NextUpdate time.Time
	// Revoked are the certificates the list revokes (their serials).
	Revoked []tls.Certificate
	// PEM writes the list as PEM (an X509 CRL block), else as DER.
	PEM bool
	// Stranger has the other CA, the one that signed StrangerClient, sign
	// it, not the PKI's.
	Stranger bool
}

// WriteCRL writes c, signed by the PKI's CA (or the other's), as the file
// path, whole: written beside it and renamed over it, as a CRL fetcher
// does, so that a listener reading it never sees half a list. It returns
// path.
func (p *PKI) WriteCRL(t testing.TB, path string, c CRL) string {
	t.Helper()
	ca, key := p.caCert, p.caKey
	if c.Stranger {
		ca, key = p.strangerCA, p.strangerKey
	}
	tmpl := &x509.RevocationList{Number: big.NewInt(c.Number), ThisUpdate: c.ThisUpdate, NextUpdate: c.NextUpdate}
	for _, r := range c.Revoked {
		leaf, err := x509.ParseCertificate(r.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: leaf.SerialNumber, RevocationTime: c.ThisUpdate})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca, key)
	if err != nil {
		t.Fatal(err)
	}
	if c.PEM {
		der = pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, der, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}
