package listeners

import (
	"crypto/tls"
	"fmt"

	"github.com/messagefoundry/mf/internal/tlsfiles"
)

// clientRevoked fails the handshake of a client whose certificate, or a CA
// of its chain, a CRL of the inbound's client_crl revokes.
type clientRevoked struct{ r *tlsfiles.Revocation }

func (e *clientRevoked) Error() string {
	return fmt.Sprintf("client certificate %q (serial %s) revoked on %s by the CRL in %s",
		e.r.Cert.Subject.CommonName, e.r.Cert.SerialNumber, e.r.RevokedAt.UTC().Format("2006-01-02 15:04 UTC"), e.r.CRL.Path)
}

// admitUnrevoked returns the check, for tls.Config.VerifyConnection, of an
// inbound with client_crl: it refuses, with a bad_certificate alert, a
// client whose verified chain holds a certificate its issuer's CRL revokes.
// crypto/tls checks no CRL; without this a revoked partner was admitted
// until its certificate expired.
func admitUnrevoked(crls *tlsfiles.CRLs) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if r := crls.Revoked(cs.VerifiedChains); r != nil {
			return &clientRevoked{r: r}
		}
		return nil
	}
}
