package tlsfiles

import (
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
)

// staleRepeat is how often a CRL whose next update has passed is logged
// again: it stays so for days when the job that fetches it broke, and a
// line a minute would bury the rest.
const staleRepeat = time.Hour

// CRLs is the certificate revocation lists of an inbound's client_crl,
// each with the CA of client_ca that signed it, as the files are on disk
// (see the package doc): a CRL fetched again, or a CA added to client_ca,
// is in force from the next handshake on. Lists that do not load (a file
// cut short, a list no CA of client_ca signed) leave those loaded before
// in force, logged at ERROR.
//
// A list whose next update has passed is still enforced: it refuses what
// it lists and admits the rest (fail-open), and is logged at WARN once an
// hour while it lasts, with its next update in
// mf_tls_crl_next_update_timestamp_seconds. A list out of date means its
// fetch broke, not that anyone was revoked, and refusing every partner of
// the CA for it would stop a hospital's clinical feeds.
type CRLs struct {
	ep Endpoint
	k  kept[*crlSet]

	mu          sync.Mutex
	staleLogged time.Time // when the lists out of date were last logged
	staleOf     *crlSet   // the lists that was of
}

// crlSet is the lists loaded from the files.
type crlSet struct {
	crls []config.CRL
	// revoked maps a certificate revoked, by its issuer and serial, to the
	// list that revokes it.
	revoked map[revokedKey]*x509.RevocationListEntry
	by      map[revokedKey]*config.CRL
	// next is the earliest next update of the lists (zero: none names one).
	next time.Time
}

// revokedKey is a certificate by its issuer (subject and key, as a verified
// chain's next certificate has them) and its serial number.
type revokedKey struct{ issuer, issuerKey, serial string }

func keyOf(serial string, issuer *x509.Certificate) revokedKey {
	return revokedKey{string(issuer.RawSubject), string(issuer.RawSubjectPublicKeyInfo), serial}
}

// LoadCRLs loads the lists of the client_crl files paths, checked against
// the client_ca bundle at caPath (config.LoadCRLs), or fails as that does.
// log is where later loads and lists out of date are told of.
func LoadCRLs(ep Endpoint, caPath string, paths []string, log zerolog.Logger) (*CRLs, error) {
	c := &CRLs{ep: ep}
	c.k = kept[*crlSet]{
		// client_ca too: a CA added or renewed there may be the one a
		// list is signed by.
		paths: append([]string{caPath}, paths...),
		load: func() (*crlSet, error) {
			crls, err := config.LoadCRLs(caPath, paths)
			if err != nil {
				return nil, err
			}
			return newCRLSet(crls), nil
		},
		changed: c.changed,
		failed: func(ev *zerolog.Event, err error) {
			ev.Err(err).Str("kind", ep.Kind).Str("name", ep.Name).
				Msg("the CRLs (client_crl) or their CAs (client_ca) changed on disk but cannot be used; still checking client certificates against the lists loaded before. Put in each client_crl file the CRL (PEM or DER) of a CA of client_ca; mf tries again at the next handshake, logged once a minute until then")
		},
	}
	if err := c.k.init(log); err != nil {
		return nil, err
	}
	return c, nil
}

func newCRLSet(crls []config.CRL) *crlSet {
	s := &crlSet{crls: crls, revoked: map[revokedKey]*x509.RevocationListEntry{}, by: map[revokedKey]*config.CRL{}}
	for i := range crls {
		c := &crls[i]
		for j := range c.List.RevokedCertificateEntries {
			e := &c.List.RevokedCertificateEntries[j]
			k := keyOf(e.SerialNumber.String(), c.Issuer)
			s.revoked[k], s.by[k] = e, c
		}
		if n := c.List.NextUpdate; !n.IsZero() && (s.next.IsZero() || n.Before(s.next)) {
			s.next = n
		}
	}
	return s
}

func (c *CRLs) changed(old, cur *crlSet) {
	n := 0
	for _, l := range cur.crls {
		n += len(l.List.RevokedCertificateEntries)
	}
	c.k.log.Load().Info().Str("kind", c.ep.Kind).Str("name", c.ep.Name).Strs("client_crl", crlPaths(cur)).
		Int("crls", len(cur.crls)).Int("revoked", n).Time("next_update", cur.next).
		Msg("changed CRLs loaded from disk; new handshakes are checked against them")
	crlSeries.Lock()
	defer crlSeries.Unlock()
	if crlSeries.owner[c.ep] == c {
		setNextUpdate(c.ep, cur)
	}
}

func crlPaths(s *crlSet) []string {
	var out []string
	for _, c := range s.crls {
		out = append(out, c.Path)
	}
	return out
}

// Revocation is a certificate of a client's chain that a CRL revokes.
type Revocation struct {
	// Cert is the certificate revoked: the client's own, or a CA of its
	// chain.
	Cert      *x509.Certificate
	RevokedAt time.Time
	// CRL is the list that revokes it.
	CRL config.CRL
}

// Revoked returns the first certificate of chains (a handshake's verified
// chains, each the client's certificate first) that a list of its issuer,
// the next certificate of the chain, revokes, or nil. It looks at the
// files first if a look is due (see the package doc).
func (c *CRLs) Revoked(chains [][]*x509.Certificate) *Revocation {
	return c.revokedAt(chains, time.Now())
}

func (c *CRLs) revokedAt(chains [][]*x509.Certificate, now time.Time) *Revocation {
	s := c.look(now)
	for _, chain := range chains {
		for i := 0; i+1 < len(chain); i++ {
			k := keyOf(chain[i].SerialNumber.String(), chain[i+1])
			if e := s.revoked[k]; e != nil {
				return &Revocation{Cert: chain[i], RevokedAt: e.RevocationTime, CRL: *s.by[k]}
			}
		}
	}
	return nil
}

// Look has the lists look at their files (a changed list is loaded and
// logged, and sets its series) and logs at WARN, once an hour, those whose
// next update has passed. The listener calls it between handshakes too.
func (c *CRLs) Look() { c.look(time.Now()) }

// look is Look at now, returning the lists in force.
func (c *CRLs) look(now time.Time) *crlSet {
	s := c.k.get(now)
	if s.next.IsZero() || !now.After(s.next) {
		return s
	}
	c.mu.Lock()
	due := s != c.staleOf || now.Sub(c.staleLogged) >= staleRepeat
	if due {
		c.staleOf, c.staleLogged = s, now
	}
	c.mu.Unlock()
	if due {
		for _, l := range s.crls {
			if why := l.Stale(now); why != "" {
				c.k.log.Load().Warn().Str("kind", c.ep.Kind).Str("name", c.ep.Name).Str("client_crl", l.Path).
					Str("crl_issuer", config.IssuerName(l.List)).Time("next_update", l.List.NextUpdate).
					Msg(why + ": " + config.StaleCRLAdvice + "; logged once an hour while it lasts")
			}
		}
	}
	return s
}

// crlSeries says which CRLs set each endpoint's
// mf_tls_crl_next_update_timestamp_seconds: the listener serving now, not
// one stopping for a reload after its successor started. Lock order: a
// kept's mu, then this.
var crlSeries struct {
	sync.Mutex
	owner map[Endpoint]*CRLs
}

// Report makes c set its endpoint's series, now and at each change of its
// lists, until Retire: the listener calls it once it serves with c.
func (c *CRLs) Report() {
	s := c.k.get(time.Now())
	crlSeries.Lock()
	defer crlSeries.Unlock()
	if crlSeries.owner == nil {
		crlSeries.owner = map[Endpoint]*CRLs{}
	}
	crlSeries.owner[c.ep] = c
	setNextUpdate(c.ep, s)
}

// Retire takes out the endpoint's series, if c sets it: the listener
// stopped, and a node that serves nothing alerts on nothing.
func (c *CRLs) Retire() {
	crlSeries.Lock()
	defer crlSeries.Unlock()
	if crlSeries.owner[c.ep] == c {
		delete(crlSeries.owner, c.ep)
		metrics.UnregisterMetric(crlSeriesName(c.ep))
	}
}

// setNextUpdate sets the series to the earliest next update of s, or takes
// it out when no list names one (such a list is never out of date).
func setNextUpdate(ep Endpoint, s *crlSet) {
	if s.next.IsZero() {
		metrics.UnregisterMetric(crlSeriesName(ep))
		return
	}
	metrics.GetOrCreateGauge(crlSeriesName(ep), nil).Set(float64(s.next.Unix()))
}

func crlSeriesName(ep Endpoint) string {
	return fmt.Sprintf(`mf_tls_crl_next_update_timestamp_seconds{kind=%s,name=%s}`, label(ep.Kind), label(ep.Name))
}

// label quotes a label value as lanes.Label does (lanes imports this
// package).
func label(s string) string { return `"` + labelEscaper.Replace(s) + `"` }

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
