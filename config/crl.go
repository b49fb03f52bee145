package config

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// CRL is one certificate revocation list of a client_crl file, with the CA
// of client_ca that signed it.
type CRL struct {
	// Path is the file it was read from.
	Path string
	List *x509.RevocationList
	// Issuer is the CA of client_ca whose signature it carries: it revokes
	// certificates that CA issued, and only those.
	Issuer *x509.Certificate
}

// Stale says of the list that its next update has passed at now (the job
// that fetches it is broken, or its CA stopped publishing), or "" when it
// has not or the list names none.
func (c CRL) Stale(now time.Time) string {
	if c.List.NextUpdate.IsZero() || !now.After(c.List.NextUpdate) {
		return ""
	}
	return "the CRL's next update has passed (" + certDate(c.List.NextUpdate) + ")"
}

// IssuerName is how logs and errors name the CA of a list: its CN, else
// its whole subject.
func IssuerName(l *x509.RevocationList) string {
	if l.Issuer.CommonName != "" {
		return l.Issuer.CommonName
	}
	return l.Issuer.String()
}

// ReadCRLs reads the certificate revocation lists of the client_crl file at
// path: every PEM "X509 CRL" block of a PEM file, or the one list of a DER
// file, as CAs publish them at their distribution points. A file that holds
// none, or a list that does not parse, is an error naming path.
func ReadCRLs(path string) ([]*x509.RevocationList, error) {
	b, err := readTLSFile(path)
	if err != nil {
		return nil, err
	}
	if block, _ := pem.Decode(b); block == nil {
		l, err := x509.ParseRevocationList(b)
		if err != nil {
			return nil, fmt.Errorf("%s holds no CRL (PEM X509 CRL blocks, or one DER list): %w", path, err)
		}
		return []*x509.RevocationList{l}, nil
	}
	var out []*x509.RevocationList
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			break
		}
		if block.Type != "X509 CRL" {
			continue
		}
		l, err := x509.ParseRevocationList(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: CRL %d does not parse: %w", path, len(out)+1, err)
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no CRL (PEM X509 CRL blocks, or one DER list): its PEM blocks are something else", path)
	}
	return out, nil
}

// ReadCAs reads the certificates of the PEM bundle at path (client_ca),
// skipping those that do not parse as x509.CertPool does.
func ReadCAs(path string) ([]*x509.Certificate, error) {
	b, err := readTLSFile(path)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for {
		var block *pem.Block
		if block, b = pem.Decode(b); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return out, nil
}

// errNotSigned: no CA of client_ca signed a list.
var errNotSigned = errors.New("not signed by a CA of client_ca")

// CRLSigner returns the CA of cas that signed l: one with l's issuer as its
// subject whose key verifies l's signature (and that may sign CRLs). A list
// no CA of client_ca signed would revoke nothing mf admits, and is most
// likely another CA's list put in the wrong file.
func CRLSigner(l *x509.RevocationList, cas []*x509.Certificate) (*x509.Certificate, error) {
	var why error
	for _, ca := range cas {
		if !bytes.Equal(ca.RawSubject, l.RawIssuer) {
			continue
		}
		err := l.CheckSignatureFrom(ca)
		if err == nil {
			return ca, nil
		}
		why = err
	}
	msg := fmt.Sprintf("the CRL of %q is %v", IssuerName(l), errNotSigned)
	if why != nil {
		// The CA is there, and its signature is not the list's: another
		// key of the same name, or a CA without the cRLSign key usage.
		msg += fmt.Sprintf(" (the CA of that name there does not verify it: %v)", why)
	}
	return nil, fmt.Errorf("%s: put in client_crl the list of the CA that signs the partners' certificates (from its CRL distribution point), or add the CA that issued this list to client_ca", msg)
}

// LoadCRLs reads the lists of the client_crl files paths and the CA that
// signed each, of the client_ca bundle at caPath: what a listener checks
// client certificates against. An error names the file.
func LoadCRLs(caPath string, paths []string) ([]CRL, error) {
	cas, err := ReadCAs(caPath)
	if err != nil {
		return nil, err
	}
	var out []CRL
	for _, p := range paths {
		lists, err := ReadCRLs(p)
		if err != nil {
			return nil, err
		}
		for _, l := range lists {
			ca, err := CRLSigner(l, cas)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			out = append(out, CRL{Path: p, List: l, Issuer: ca})
		}
	}
	return out, nil
}

// checkCRLFiles refuses client_crl (at key) without client_ca, where no
// client certificate is asked for, a file that cannot be read or holds no
// CRL, and a list that no CA of client_ca signed.
func checkCRLFiles(key string, in Inbound, bad func(key, format string, args ...any)) {
	if len(in.ClientCRL) == 0 {
		return
	}
	if in.ClientCA == "" {
		bad(key, "needs client_ca: without it the listener asks for no client certificate, so there is none to check against a CRL; set client_ca to the PEM file of the CA that signs the partners' certificates and publishes the CRL")
		return
	}
	cas, err := ReadCAs(in.ClientCA)
	if err != nil {
		return // client_ca's own error says why
	}
	for i, p := range in.ClientCRL {
		k := fmt.Sprintf("%s[%d]", key, i)
		lists, err := ReadCRLs(p)
		if err != nil {
			bad(k, "%v", err)
			continue
		}
		for _, l := range lists {
			if _, err := CRLSigner(l, cas); err != nil {
				bad(k, "%s: %v", p, err)
			}
		}
	}
}

// crlWarnings lists, for the client_crl of the inbound at key, each list
// whose next update has passed at now: its revocations are still enforced,
// but certificates revoked since are admitted (see README, client_crl).
func crlWarnings(key string, in Inbound, now time.Time) []string {
	if len(in.ClientCRL) == 0 || in.ClientCA == "" {
		return nil
	}
	crls, err := LoadCRLs(in.ClientCA, in.ClientCRL)
	if err != nil {
		return nil // validation reports it
	}
	var w []string
	for _, c := range crls {
		if why := c.Stale(now); why != "" {
			w = append(w, fmt.Sprintf("%s: %s: %s of CA %q: %s", key, c.Path, why, IssuerName(c.List), StaleCRLAdvice))
		}
	}
	return w
}

// StaleCRLAdvice is what to do about a CRL whose next update has passed.
const StaleCRLAdvice = "certificates its CA revoked since are still admitted (the certificates it lists are refused); fetch the CA's current CRL into the file (mf takes it within seconds, without a reload) and mend the job that fetches it"
