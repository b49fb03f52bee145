package tlsfiles

import (
	"crypto/tls"
	"time"
)

// CertificateAt is Certificate asked at now: tests pass the settle and
// repeat times without waiting them out.
func (p *Pair) CertificateAt(now time.Time) *tls.Certificate { return p.k.get(now) }
