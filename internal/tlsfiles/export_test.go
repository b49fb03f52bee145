package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"time"
)

// CertificateAt is Certificate asked at now: tests pass the settle and
// repeat times without waiting them out.
func (p *Pair) CertificateAt(now time.Time) *tls.Certificate { return p.k.get(now) }

// RevokedAt is Revoked asked at now.
func (c *CRLs) RevokedAt(chains [][]*x509.Certificate, now time.Time) *Revocation {
	return c.revokedAt(chains, now)
}
