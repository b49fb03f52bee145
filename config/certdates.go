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

// certWarning says of the certificate file at path (a tls_cert) that it is
// out of its dates or expires within CertRenewWithin, or "" (no path, a
// file that does not parse, which validation reports, or one in date).
func certWarning(path string, now time.Time) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	// The first certificate is the file's own (the rest, its chain).
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			return ""
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return ""
		}
		if why := CertOutOfDate(c, now); why != "" {
			return fmt.Sprintf("%s %s: TLS peers refuse it, so every handshake fails; renew it (mf reads it at start: restart mf run then)", path, why)
		}
		if left := c.NotAfter.Sub(now); left < CertRenewWithin {
			return fmt.Sprintf("%s expires on %s, in %d days: renew it before then (mf reads it at start: restart mf run then)", path, certDate(c.NotAfter), int(left.Hours()/24))
		}
		return ""
	}
}
