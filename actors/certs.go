package actors

import (
	"fmt"
	"sync"

	"github.com/VictoriaMetrics/metrics"

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
// (tlsfiles), the API too. withAPI is false on a reload: the API loads its
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
