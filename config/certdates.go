package config

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"
)

// CertRenewWithin is how long before its expiry a certificate is warned of.
const CertRenewWithin = 30 * 24 * time.Hour

// CertOutOfDate says of c that it is outside its dates at now ("expired on
// …", "is not valid before …"), or "" when it is within them. TLS peers
// refuse such a certificate, and a failed handshake says only that.
func CertOutOfDate(c *x509.Certificate, now time.Time) string {
	switch {
	case now.After(c.NotAfter):
		return "expired on " + certDate(c.NotAfter)
	case now.Before(c.NotBefore):
		return "is not valid before " + certDate(c.NotBefore)
	}
	return ""
}

func certDate(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// renewedAtHandshake is when mf takes a renewed certificate, as
// certWarning says: the API, the listeners and the destinations read their
// files again at a handshake after they change (internal/tlsfiles).
const renewedAtHandshake = "mf serves the renewed tls_cert and tls_key from the next handshake, without a restart"

// certWarning says of the certificate file at path (a tls_cert) that it is
// out of its dates or expires within CertRenewWithin, or "" (no path, a
// file that does not parse, which validation reports, or one in date).
// renewed says when mf takes a renewed file.
func certWarning(path, renewed string, now time.Time) string {
	c := ownCert(path)
	if c == nil {
		return ""
	}
	if why := CertOutOfDate(c, now); why != "" {
		return fmt.Sprintf("%s %s: TLS peers refuse it, so every handshake fails; renew it (%s)", path, why, renewed)
	}
	if left := c.NotAfter.Sub(now); left < CertRenewWithin {
		return fmt.Sprintf("%s expires on %s, in %d days: renew it before then (%s)", path, certDate(c.NotAfter), int(left.Hours()/24), renewed)
	}
	return ""
}

// ownCert is the first certificate of the PEM file at path, the file's own
// (the rest are its chain), or nil: no path, or a file that cannot be read
// or does not parse, which validation reports.
func ownCert(path string) *x509.Certificate {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return nil
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil
		}
		return c
	}
}

// CertExpiry is when the certificate of one TLS endpoint of the config
// expires: Kind is "api", "inbound" or "outbound", Name the inbound's or
// outbound's name ("api" for the API).
type CertExpiry struct {
	Kind, Name string
	NotAfter   time.Time
}

// CertExpiries lists the expiry of every tls_cert the config names that
// can be read, in the order api, inbounds, outbounds: what monitoring
// alerts on before peers start refusing the handshakes. A standby lists
// its listeners' too, which it serves once elected.
func (c *Config) CertExpiries() []CertExpiry {
	var out []CertExpiry
	add := func(kind, name, path string) {
		if cert := ownCert(path); cert != nil {
			out = append(out, CertExpiry{Kind: kind, Name: name, NotAfter: cert.NotAfter})
		}
	}
	add("api", "api", c.API.TLSCert)
	for _, in := range c.Inbound {
		add("inbound", in.Name, in.TLSCert)
	}
	for _, o := range c.Outbound {
		add("outbound", o.Name, o.TLSCert)
	}
	return out
}
