// Package tlsfiles serves a TLS endpoint's certificate, key and CA bundle as
// they are on disk now, not as they were at start. Renewal tools (certbot
// and other ACME clients, a hospital PKI's agent) replace the files in
// place; an endpoint that read them once served the old certificate until
// it expired, and then every handshake failed.
//
// A Pair (tls_cert and tls_key), a Pool (a CA bundle) or CRLs (client_crl,
// with client_ca) looks at its files
// when it is asked for its contents, during a handshake or by its owner
// every IdleLook, at most once a CheckInterval: their size, modification time and identity (os.SameFile,
// which sees a file replaced by a rename or a symbolic link moved, as
// certbot's live/ links are). When one changed it loads them again and
// serves what they hold from then on; what does not load (a key that is not
// the certificate's, a file half written) leaves the loaded contents in
// service and is logged at ERROR, saying what to do, and tried again at the
// next look.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
)

// CheckInterval is the most often an endpoint looks at its files: a
// renewed file is served from the first handshake at least this long after
// the last look. Two stats a look, a second apart at the most, cost
// nothing beside a handshake.
const CheckInterval = time.Second

// IdleLook is how often the owner of a Pair asks for it between handshakes
// (a listener's timer, the lanes' rescan, and on a node that runs no graph
// the engine's root, for its listeners' and destinations' files): MLLP
// connections last for days, and without a handshake a renewal would go
// unseen, and the expiry series would say the old certificate's date,
// firing the expiry alerts.
const IdleLook = 5 * time.Second

// settle is how long files that changed and do not load must have been
// left alone before that is logged at ERROR: a renewal that writes the
// certificate and then the key has, in between, a certificate that is not
// its key's, which the next look finds mended.
const settle = 10 * time.Second

// failRepeat is how often files that still do not load are logged again.
const failRepeat = time.Minute

// Endpoint names the owner of the files, in logs and in the series
// mf_tls_cert_expiry_timestamp_seconds{kind,name}: Kind is "api",
// "inbound" or "outbound", Name the inbound's or outbound's name.
type Endpoint struct{ Kind, Name string }

// kept holds what files load into, loaded again when they change. It is
// safe for concurrent use: every handshake of an endpoint asks it.
type kept[T any] struct {
	paths []string
	load  func() (T, error)
	// taken says whether to serve v, newly loaded, in place of cur (nil:
	// always); why it is not is logged as a load error would be.
	taken func(cur, v T, now time.Time) error
	// changed is called, under mu, with what was served and what is now.
	changed func(old, cur T)
	// failed logs at ERROR why files that changed do not load.
	failed func(ev *zerolog.Event, err error)
	log    atomic.Pointer[zerolog.Logger]

	mu      sync.Mutex
	cur     T
	seen    []os.FileInfo // of the files cur was loaded from
	checked time.Time
	failing time.Time // when a look first found changed files that do not load
	logged  time.Time // when failed was last called
}

// init loads the files for the first time.
func (k *kept[T]) init(log zerolog.Logger) error {
	k.log.Store(&log)
	seen, err := stat(k.paths)
	if err != nil {
		return err
	}
	v, err := k.load()
	if err != nil {
		return err
	}
	k.cur, k.seen, k.checked = v, seen, time.Now()
	return nil
}

// get returns what the files hold, after a look at them if one is due.
func (k *kept[T]) get(now time.Time) T {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now.Sub(k.checked) < CheckInterval {
		return k.cur
	}
	k.checked = now
	// Stat first, then read: a file replaced in between is read new and
	// stamped old, and the next look loads it again, which does no harm.
	seen, err := stat(k.paths)
	if err == nil && same(seen, k.seen) {
		return k.cur
	}
	var v T
	if err == nil {
		v, err = k.load()
	}
	if err == nil && k.taken != nil {
		err = k.taken(k.cur, v, now)
	}
	if err != nil {
		if k.failing.IsZero() {
			k.failing = now
		}
		// Since when the files are as they are: their last change, or for
		// one that is not there (deleted to be written again), the first
		// look that missed it.
		since := newest(seen)
		if seen == nil {
			since = k.failing
		}
		if now.Sub(k.logged) >= failRepeat && now.Sub(since) >= settle {
			k.logged = now
			k.failed(k.log.Load().Error().Strs("files", k.paths), err)
		}
		return k.cur
	}
	old := k.cur
	k.cur, k.seen, k.failing, k.logged = v, seen, time.Time{}, time.Time{}
	k.changed(old, v)
	return v
}

// stat looks at each of paths; a file that cannot be looked at (being
// replaced, say) is an error, as it is to load.
func stat(paths []string) ([]os.FileInfo, error) {
	out := make([]os.FileInfo, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out[i] = fi
	}
	return out, nil
}

// same reports whether a and b are the same files, unchanged.
func same(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size() {
			return false
		}
	}
	return true
}

// newest is the latest modification time of fis.
func newest(fis []os.FileInfo) time.Time {
	var t time.Time
	for _, fi := range fis {
		if fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t
}

// Pair is a certificate and its private key (tls_cert, tls_key), as on
// disk (see the package doc).
type Pair struct {
	ep                Endpoint
	certPath, keyPath string
	k                 kept[*tls.Certificate]
}

// LoadPair loads the certificate of certPath and the key of keyPath, or
// fails as tls.LoadX509KeyPair does. log is where later loads are told of.
func LoadPair(ep Endpoint, certPath, keyPath string, log zerolog.Logger) (*Pair, error) {
	p := &Pair{ep: ep, certPath: certPath, keyPath: keyPath}
	p.k = kept[*tls.Certificate]{
		paths:   []string{certPath, keyPath},
		load:    p.load,
		taken:   inDates,
		changed: p.renewed,
		failed: func(ev *zerolog.Event, err error) {
			cur := p.k.cur.Leaf
			ev.Err(err).Str("kind", ep.Kind).Str("name", ep.Name).Time("serving_not_after", cur.NotAfter).
				Msg("the TLS certificate or key changed on disk but the new pair cannot be used; still serving the certificate loaded before. Put the renewed certificate (PEM, its chain after it) in tls_cert and its own private key in tls_key; mf tries again at the next handshake, logged once a minute until then")
		},
	}
	if err := p.k.init(log); err != nil {
		return nil, err
	}
	// What setCertMetrics read may be older: this node was elected, or its
	// listener opened its port, after a renewal.
	setExpiry(ep, p.k.cur.Leaf.NotAfter)
	return p, nil
}

func (p *Pair) load() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(p.certPath, p.keyPath)
	if err != nil {
		return nil, err
	}
	return &c, nil // Leaf is set (Go 1.23 and later)
}

// inDates refuses a renewed certificate out of its dates (an old file put
// back, a clock behind the issuer's) while the one in service is in its
// own: serving it would fail handshakes that work.
func inDates(cur, v *tls.Certificate, now time.Time) error {
	if why := config.CertOutOfDate(v.Leaf, now); why != "" && config.CertOutOfDate(cur.Leaf, now) == "" {
		return fmt.Errorf("the certificate on disk (serial %s) %s, and the one in service is still valid", v.Leaf.SerialNumber, why)
	}
	return nil
}

func (p *Pair) renewed(old, cur *tls.Certificate) {
	setExpiry(p.ep, cur.Leaf.NotAfter)
	p.k.log.Load().Info().Str("kind", p.ep.Kind).Str("name", p.ep.Name).Str("tls_cert", p.certPath).
		Str("serial", cur.Leaf.SerialNumber.String()).Time("not_after", cur.Leaf.NotAfter).Time("was_not_after", old.Leaf.NotAfter).
		Msg("renewed TLS certificate loaded from disk; new handshakes use it")
}

// SetLog sets where later loads are told of.
func (p *Pair) SetLog(log zerolog.Logger) { p.k.log.Store(&log) }

// Certificate is the pair to present now.
func (p *Pair) Certificate() *tls.Certificate { return p.k.get(time.Now()) }

// Leaf is the certificate presented now.
func (p *Pair) Leaf() *x509.Certificate { return p.Certificate().Leaf }

// Pool is a bundle of CA certificates (client_ca) as on disk (see the
// package doc).
type Pool struct {
	k kept[*x509.CertPool]
}

// LoadPool loads the PEM certificates of path (the file of key, as the
// config names it: "client_ca"), or fails when it holds none.
func LoadPool(ep Endpoint, key, path string, log zerolog.Logger) (*Pool, error) {
	p := &Pool{}
	p.k = kept[*x509.CertPool]{
		paths: []string{path},
		load: func() (*x509.CertPool, error) {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b) {
				return nil, fmt.Errorf("%s %s holds no PEM certificate", key, path)
			}
			return pool, nil
		},
		changed: func(_, _ *x509.CertPool) {
			p.k.log.Load().Info().Str("kind", ep.Kind).Str("name", ep.Name).Str(key, path).
				Msg("changed CA bundle loaded from disk; new handshakes verify with it")
		},
		failed: func(ev *zerolog.Event, err error) {
			ev.Err(err).Str("kind", ep.Kind).Str("name", ep.Name).
				Msg("the CA bundle (" + key + ") changed on disk but cannot be read; still verifying with the CAs loaded before. Put the PEM certificates of the CAs in it; mf tries again at the next handshake, logged once a minute until then")
		},
	}
	if err := p.k.init(log); err != nil {
		return nil, err
	}
	return p, nil
}

// CertPool is the bundle to verify with now.
func (p *Pool) CertPool() *x509.CertPool { return p.k.get(time.Now()) }

// expiry holds the mf_tls_cert_expiry_timestamp_seconds gauges of the
// endpoints of the config in force, which a renewal sets.
var expiry struct {
	sync.Mutex
	gauges map[Endpoint]*metrics.Gauge
}

// TrackExpiry makes a renewal from now on set the gauge that gauges gives
// for its endpoint, and no other: a listener stopping for a reload that
// took it out must not bring back the series the reload retired.
func TrackExpiry(gauges map[Endpoint]*metrics.Gauge) {
	expiry.Lock()
	defer expiry.Unlock()
	expiry.gauges = gauges
}

func setExpiry(ep Endpoint, notAfter time.Time) {
	expiry.Lock()
	defer expiry.Unlock()
	if g := expiry.gauges[ep]; g != nil {
		g.Set(float64(notAfter.Unix()))
	}
}
