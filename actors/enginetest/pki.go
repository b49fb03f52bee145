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
}

// NewPKI makes the certificates in dir.
func NewPKI(t testing.TB, dir string) *PKI {
	t.Helper()
	caCert, caKey := selfSignedCA(t, "mf test CA")
	p := &PKI{Pool: x509.NewCertPool()}
	p.Pool.AddCert(caCert)
	p.CAFile = WriteFile(t, dir, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}))

	srvDER, srvKey := leaf(t, caCert, caKey, "mf server", x509.ExtKeyUsageServerAuth)
	p.ServerCert = WriteFile(t, dir, "server.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}))
	p.ServerKey = WriteFile(t, dir, "server.key", keyPEM(t, srvKey))

	cliDER, cliKey := leaf(t, caCert, caKey, "partner", x509.ExtKeyUsageClientAuth)
	p.Client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}

	otherCA, otherKey := selfSignedCA(t, "someone else's CA")
	strDER, strKey := leaf(t, otherCA, otherKey, "stranger", x509.ExtKeyUsageClientAuth)
	p.StrangerClient = tls.Certificate{Certificate: [][]byte{strDER}, PrivateKey: strKey}
	return p
}

func selfSignedCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
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

func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
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

func keyPEM(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: b})
}
