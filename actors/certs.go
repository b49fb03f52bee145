package actors

import (
	"fmt"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/tlsfiles"
	"github.com/messagefoundry/mf/lanes"
)

// certSeries holds the names of the mf_tls_cert_expiry_timestamp_seconds
// series set last, so that a reload can retire those of endpoints it took
// out (left behind, a removed listener's old certificate would keep an
// expiry alert firing).
var certSeries struct {
	sync.Mutex
	names map[string]string // series name -> kind
}

// setCertMetrics sets mf_tls_cert_expiry_timestamp_seconds{kind,name} to
// the expiry of each certificate cfg names (config.CertExpiries), read now,
// as the graph about to start reads them; the listeners and destinations
// set their own series again when they load a renewed certificate
// (tlsfiles), the API too, and root while no graph runs (standbyCerts). withAPI is false on a reload: the API loads its
// certificate at the process's start (and then its renewals) only, so its
// series keeps the expiry of the certificate it serves.
func setCertMetrics(cfg *config.Config, withAPI bool) {
	certSeries.Lock()
	defer certSeries.Unlock()
	next := map[string]string{}
	renewable := map[tlsfiles.Endpoint]*metrics.Gauge{}
	for _, c := range cfg.CertExpiries() {
		if c.Kind == "api" && !withAPI {
			continue
		}
		name := fmt.Sprintf(`mf_tls_cert_expiry_timestamp_seconds{kind=%s,name=%s}`, lanes.Label(c.Kind), lanes.Label(c.Name))
		g := metrics.GetOrCreateGauge(name, nil)
		g.Set(float64(c.NotAfter.Unix()))
		next[name] = c.Kind
		renewable[tlsfiles.Endpoint{Kind: c.Kind, Name: c.Name}] = g
	}
	for name, kind := range certSeries.names {
		if _, kept := next[name]; kept {
			continue
		}
		if kind == "api" && !withAPI {
			// Kept, and still set by the API's renewals.
			next[name] = kind
			renewable[tlsfiles.Endpoint{Kind: "api", Name: "api"}] = metrics.GetOrCreateGauge(name, nil)
			continue
		}
		metrics.UnregisterMetric(name)
	}
	certSeries.names = next
	// From now on a listener, a destination or the API that loads its
	// renewed certificate sets its series; one the reload took out sets
	// none.
	tlsfiles.TrackExpiry(renewable)
}

// lookAtCerts has root look at the files of standbyCerts.
type lookAtCerts struct{}

// standbyCertLook is how often a node that runs no graph looks at its
// listeners' and destinations' certificate files; a test shortens it.
var standbyCertLook = tlsfiles.IdleLook

// standbyCerts follows, while no graph runs on this node (a standby, or a
// node not yet elected), the certificate files of the inbounds and
// outbounds of the config in force: no listener or destination runs to
// look at them, and without a look their
// mf_tls_cert_expiry_timestamp_seconds series kept the old certificate's
// date after a renewal until the next start, reload or election, firing
// the expiry alerts for every standby and hiding whether its own copy,
// which it serves once elected, was renewed. Root owns it (the graph's
// lifecycle decides when it runs) and asks it to look every
// tlsfiles.IdleLook, as a listener does between handshakes: a minute would
// do for an alert that waits an hour, but the same delay on every node is
// one rule to document and to wait on, and a look costs two stats a
// certificate, reading only files that changed. A pair that does not load
// leaves its series as it was (tlsfiles logs why).
type standbyCerts struct {
	// of is the config the pairs are those of (nil: none loaded).
	of    *config.Config
	certs []standbyCert
	looks scheduler.CancelFunc
}

// standbyCert is one tls_cert and tls_key; pair is nil until they load.
type standbyCert struct {
	ep        tlsfiles.Endpoint
	cert, key string
	pair      *tlsfiles.Pair
	// warned says that a failure to load has been logged (once until
	// they load).
	warned bool
}

// watch makes the looks run exactly while no graph runs here: root calls
// it after every message, which may have started or stopped the graph, or
// reloaded the config (whose files then replace the pairs).
func (s *standbyCerts) watch(ctx actor.Context, cfg *config.Config, graphRuns bool, log zerolog.Logger) {
	if graphRuns {
		// Its listeners and destinations look at their files, and set the
		// series; loaded again when it stops, the pairs start from what
		// they took.
		s.stop()
		return
	}
	if s.of != cfg {
		s.of, s.certs = cfg, nil
		for _, in := range cfg.Inbound {
			if in.TLSCert != "" {
				s.certs = append(s.certs, standbyCert{ep: tlsfiles.Endpoint{Kind: "inbound", Name: in.Name}, cert: in.TLSCert, key: in.TLSKey})
			}
		}
		for _, o := range cfg.Outbound {
			if o.TLSCert != "" {
				s.certs = append(s.certs, standbyCert{ep: tlsfiles.Endpoint{Kind: "outbound", Name: o.Name}, cert: o.TLSCert, key: o.TLSKey})
			}
		}
		s.look(log)
	}
	if s.looks == nil && len(s.certs) > 0 {
		s.looks = scheduler.NewTimerScheduler(ctx).SendRepeatedly(standbyCertLook, standbyCertLook, ctx.Self(), lookAtCerts{})
	}
}

// look has each pair look at its files (tlsfiles: a renewal is loaded,
// logged and sets its series; what does not load keeps the pair in place),
// and loads the pairs that did not load before.
func (s *standbyCerts) look(log zerolog.Logger) {
	for i := range s.certs {
		c := &s.certs[i]
		if c.pair != nil {
			c.pair.Certificate()
			continue
		}
		log := log.With().Str("component", "standby").Logger()
		// Loading sets the series.
		p, err := tlsfiles.LoadPair(c.ep, c.cert, c.key, log)
		if err != nil {
			if !c.warned {
				c.warned = true
				log.Warn().Err(err).Str("kind", c.ep.Kind).Str("name", c.ep.Name).Str("tls_cert", c.cert).Str("tls_key", c.key).
					Msg("this node runs no graph, and the TLS certificate and key of this endpoint, which it serves once elected, do not load now; its expiry series keeps the date read before. Put the certificate (PEM, its chain after it) in tls_cert and its own private key in tls_key; mf tries again every 5 s")
			}
			continue
		}
		if c.warned {
			log.Info().Str("kind", c.ep.Kind).Str("name", c.ep.Name).Str("tls_cert", c.cert).Time("not_after", p.Leaf().NotAfter).
				Msg("the TLS certificate and key of this endpoint load again")
		}
		c.pair, c.warned = p, false
	}
}

// stop ends the looks and forgets the pairs.
func (s *standbyCerts) stop() {
	if s.looks != nil {
		s.looks()
	}
	*s = standbyCerts{}
}
