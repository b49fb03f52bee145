package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
)

// FingerprintFormat prefixes every GraphFingerprint. It changes whenever
// what the fingerprint covers changes, so that during a rolling upgrade two
// builds that hash different things are told apart (SameFormat) instead of
// reported as a drift.
const FingerprintFormat = "v1"

// graphConfig is what GraphFingerprint hashes: the settings the primary's
// graph (actors/graph.go, listeners, lanes, the sweeper) runs on, which every
// node of a cluster must share, since any of them may become the primary.
//
// Left out, as the node's own:
//   - [cluster] but reclaim_interval_seconds: the node's identity and its
//     leadership timings, not what the graph does with a message;
//   - [store] but lease_ttl_seconds and retention_days: the node's database
//     connection (url, password, pool size);
//   - [api]: every node serves its own API, with its own address and TLS;
//   - log_payloads: what this node's logs may carry, for where they go;
//   - an inbound's listen address and allow_plaintext: the address a node
//     binds is its own interface (two nodes on one host need two ports; a
//     VIP or balancer maps one address onto each), and allow_plaintext only
//     consents to that bind;
//   - TLS file paths (tls_cert, tls_key, client_ca, client_crl, tls_ca): each node
//     holds its own certificate and key, often under a name of its own, so
//     their paths legitimately differ. Whether each is set is kept: that
//     turns TLS, mutual TLS or a client certificate on or off, which does
//     change what a partner sees after a failover.
//
// Kept, although paths: an inbound's directory and archive_directory and a
// file outbound's directory. They are not the node's own but where messages
// come from and go to: a node that polls or writes another directory reads
// another feed or delivers to another destination once it is primary,
// which is the drift this is for. (A share mounted under another path on
// each host would show as a drift: mount it under the same path.)
type graphConfig struct {
	Format   string     `json:"format"`
	Inbound  []Inbound  `json:"inbound"`
	Outbound []Outbound `json:"outbound"`
	// Route keeps file order within each inbound: routes are evaluated in
	// that order, and the first matching route that names a destination
	// decides its lane (lanes.Router.Route). Routes of different inbounds
	// never meet, so they are grouped by inbound (a stable sort), and moving
	// one inbound's routes among another's changes nothing.
	Route []Route `json:"route"`
	// Read by the graph: the lanes' row lease, the purge, the sweep.
	LeaseTTLSeconds        float64 `json:"lease_ttl_seconds"`
	RetentionDays          float64 `json:"retention_days"`
	ReclaimIntervalSeconds float64 `json:"reclaim_interval_seconds"`
}

// set stands for a TLS file path in graphConfig: whether it is given, not
// which file.
func set(path string) string {
	if path == "" {
		return ""
	}
	return "set"
}

// GraphFingerprint returns a canonical fingerprint of the part of c that the
// primary's graph runs (see graphConfig for what it covers and why):
// FingerprintFormat, ":", and the hex SHA-256 of a canonical JSON encoding.
// c is a loaded config (Load: defaults applied), so a key left to its
// default and one written with the default's value give the same
// fingerprint; the order of keys, whitespace and comments in the file never
// matter, nor the order of [[inbound]] and [[outbound]] tables (they are
// named). A nil c has the fingerprint "".
func (c *Config) GraphFingerprint() string {
	if c == nil {
		return ""
	}
	g := graphConfig{
		Format:                 FingerprintFormat,
		Inbound:                make([]Inbound, 0, len(c.Inbound)),
		Outbound:               make([]Outbound, 0, len(c.Outbound)),
		Route:                  make([]Route, 0, len(c.Route)),
		LeaseTTLSeconds:        c.Store.LeaseTTLSeconds,
		RetentionDays:          c.Store.RetentionDays,
		ReclaimIntervalSeconds: c.Cluster.ReclaimIntervalSeconds,
	}
	for _, in := range c.Inbound {
		in.Listen, in.AllowPlaintext = "", false
		in.TLSCert, in.TLSKey, in.ClientCA = set(in.TLSCert), set(in.TLSKey), set(in.ClientCA)
		if len(in.ClientCRL) > 0 {
			in.ClientCRL = []string{"set"}
		}
		in.TLSClientNames = slices.Sorted(slices.Values(in.TLSClientNames)) // a set: order means nothing
		g.Inbound = append(g.Inbound, in)
	}
	for _, o := range c.Outbound {
		o.TLSCA, o.TLSCert, o.TLSKey = set(o.TLSCA), set(o.TLSCert), set(o.TLSKey)
		g.Outbound = append(g.Outbound, o)
	}
	slices.SortFunc(g.Inbound, func(a, b Inbound) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(g.Outbound, func(a, b Outbound) int { return strings.Compare(a.Name, b.Name) })
	for _, r := range c.Route {
		if r.Filter == nil {
			r.Filter = map[string]string{} // no filter and an empty one are one
		}
		g.Route = append(g.Route, r)
	}
	slices.SortStableFunc(g.Route, func(a, b Route) int { return strings.Compare(a.From, b.From) })
	// encoding/json writes struct fields in declaration order and map keys
	// sorted (a filter's paths): the encoding is canonical.
	b, err := json.Marshal(g)
	if err != nil {
		panic("config: encode the graph config for its fingerprint: " + err.Error()) // only plain types: cannot fail
	}
	sum := sha256.Sum256(b)
	return FingerprintFormat + ":" + hex.EncodeToString(sum[:])
}

// SameFormat reports whether fingerprints a and b were computed the same way
// (by builds that hash the same settings), so that comparing them means
// something. An empty one (a node of an mf before fingerprints) never is.
func SameFormat(a, b string) bool {
	fa, _, okA := strings.Cut(a, ":")
	fb, _, okB := strings.Cut(b, ":")
	return okA && okB && fa == fb
}
