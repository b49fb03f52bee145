package listeners

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
)

// clientNotListed fails the handshake of a client whose certificate, which
// client_ca verified, carries none of the inbound's tls_client_names.
type clientNotListed struct {
	names []string // the names the certificate is known by (clientNames)
}

func (e *clientNotListed) Error() string {
	return fmt.Sprintf("client certificate names %q, none of them in tls_client_names", e.names)
}

// clientNames is what tls_client_names matches of a client certificate: its
// DNS names (subject alternative names) if it has any, else its subject CN.
// As for a server's certificate, the CN is a fallback only: a certificate
// with DNS names is known by those.
func clientNames(c *x509.Certificate) []string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames
	}
	if c.Subject.CommonName != "" {
		return []string{c.Subject.CommonName}
	}
	return nil
}

// admitListed returns the tls.Config.VerifyConnection of an inbound with
// tls_client_names listed: it runs once the client's chain is verified
// (and again on a resumed session), and refuses, with a bad_certificate
// alert, a client none of whose names (clientNames) is listed, compared
// without regard to case. A wildcard is compared as written, not expanded.
func admitListed(listed []string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		var names []string
		if len(cs.PeerCertificates) > 0 {
			names = clientNames(cs.PeerCertificates[0])
		}
		for _, n := range names {
			if slices.ContainsFunc(listed, func(l string) bool { return strings.EqualFold(n, l) }) {
				return nil
			}
		}
		return &clientNotListed{names: names}
	}
}
