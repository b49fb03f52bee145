package config_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
)

// fingerprintBase is a cluster node's file with two inbounds, three
// outbounds and three routes, against which the cases below are written.
const fingerprintBase = `
[store]
backend = "postgres"
url = "postgres://mf@db-a.internal/mf"
pool_size = 4

[cluster]
enabled = true
node_id = "node-a"

[api]
listen = "127.0.0.1:8765"

[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:2575"

[[inbound]]
name = "files_in"
type = "file"
directory = "/srv/mf/in"

[[outbound]]
name = "lab"
type = "mllp"
address = "lab.internal:2576"

[[outbound]]
name = "ris"
type = "mllp"
address = "ris.internal:2576"
tls = true
tls_ca = "/etc/mf/node-a/ca.pem"

[[outbound]]
name = "archive"
type = "file"
directory = "/srv/mf/out"

[[route]]
from = "adt_in"
to = ["lab"]
filter = { "MSH-9.1" = "ADT", "MSH-3" = "EPIC" }
lane_key = "PID-3.1"

[[route]]
from = "files_in"
to = ["archive"]

[[route]]
from = "adt_in"
to = ["ris", "lab"]
`

// caFiles maps the CA paths the cases write to real CA files (Parse loads
// TLS files): two nodes holding their CA under paths of their own.
var caFiles = map[string]string{}

func fingerprintOf(t *testing.T, file string) string {
	t.Helper()
	for path, real := range caFiles {
		file = strings.ReplaceAll(file, path, real)
	}
	c, err := config.Parse([]byte(file), "mf.toml")
	if err != nil {
		t.Fatalf("%v\n%s", err, file)
	}
	fp := c.GraphFingerprint()
	if !strings.HasPrefix(fp, config.FingerprintFormat+":") || len(fp) != len(config.FingerprintFormat)+1+64 {
		t.Fatalf("fingerprint %q: want %s: and 64 hex digits", fp, config.FingerprintFormat)
	}
	return fp
}

// replace applies old→new pairs to fingerprintBase, each of which must be
// there, so that a case cannot silently test the base against itself.
func replace(t *testing.T, pairs ...string) string {
	t.Helper()
	s := fingerprintBase
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("the base file has no %q", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

// The fingerprint is the same for files that run the same graph however
// they are written, and for node-specific settings; it differs as soon as
// what the primary's graph would do with a message differs.
func TestGraphFingerprintCoversTheGraphAndOnlyIt(t *testing.T) {
	caFiles["/etc/mf/node-a/ca.pem"] = enginetest.NewPKI(t, t.TempDir()).CAFile
	caFiles["/etc/mf/node-b/ca.pem"] = enginetest.NewPKI(t, t.TempDir()).CAFile
	base := fingerprintOf(t, fingerprintBase)
	same := map[string]string{
		"comments, blank lines, spacing": replace(t,
			"[[route]]\nfrom = \"files_in\"", "# the archive feed\n\n[[route]]\nfrom   =   \"files_in\"   # inbound"),
		"key order within a table": replace(t,
			"name = \"lab\"\ntype = \"mllp\"\naddress = \"lab.internal:2576\"", "address = \"lab.internal:2576\"\ntype = \"mllp\"\nname = \"lab\""),
		"filter keys in another order": replace(t,
			`{ "MSH-9.1" = "ADT", "MSH-3" = "EPIC" }`, `{ "MSH-3" = "EPIC", "MSH-9.1" = "ADT" }`),
		"a default written out": replace(t,
			"address = \"lab.internal:2576\"\n", "address = \"lab.internal:2576\"\nconnections = 1\non_exhausted = \"block\"\ntimeout_seconds = 30\n"),
		"outbounds in another order": replace(t,
			"[[outbound]]\nname = \"lab\"\ntype = \"mllp\"\naddress = \"lab.internal:2576\"\n\n", "",
			"[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]", "[[outbound]]\nname = \"lab\"\ntype = \"mllp\"\naddress = \"lab.internal:2576\"\n\n[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]"),
		"another inbound's route moved among this one's": replace(t,
			"[[route]]\nfrom = \"files_in\"\nto = [\"archive\"]\n", "",
			"[[route]]\nfrom = \"adt_in\"\nto = [\"ris\", \"lab\"]\n", "[[route]]\nfrom = \"adt_in\"\nto = [\"ris\", \"lab\"]\n\n[[route]]\nfrom = \"files_in\"\nto = [\"archive\"]\n"),
		"node_id":                      replace(t, `node_id = "node-a"`, `node_id = "node-b"`),
		"store url and pool":           replace(t, "url = \"postgres://mf@db-a.internal/mf\"\npool_size = 4", "url = \"postgres://mf@db-b.internal/mf\"\npool_size = 8"),
		"api listen":                   replace(t, `listen = "127.0.0.1:8765"`, `listen = "127.0.0.1:9765"`),
		"an inbound's listen address":  replace(t, `listen = "127.0.0.1:2575"`, `listen = "127.0.0.2:2576"`),
		"a TLS file's path":            replace(t, `tls_ca = "/etc/mf/node-a/ca.pem"`, `tls_ca = "/etc/mf/node-b/ca.pem"`),
		"log_payloads":                 "log_payloads = true\n" + fingerprintBase,
		"leadership timings":           replace(t, "enabled = true\n", "enabled = true\nheartbeat_seconds = 5\nleader_fence_timeout_seconds = 10\nleader_lease_ttl_seconds = 15\n"),
		"a file outbound's path, same": replace(t, `directory = "/srv/mf/out"`, `directory = "/srv/mf/out"`+"\ncreate_directory = true"),
	}
	for name, file := range same {
		if got := fingerprintOf(t, file); got != base {
			t.Errorf("%s: fingerprint %s, want the base's %s", name, got, base)
		}
	}
	differ := map[string]string{
		"a route's destination dropped":    replace(t, `to = ["ris", "lab"]`, `to = ["ris"]`),
		"a route's destinations reordered": replace(t, `to = ["ris", "lab"]`, `to = ["lab", "ris"]`),
		"a filter value":                   replace(t, `"MSH-9.1" = "ADT"`, `"MSH-9.1" = "ORU"`),
		"a lane_key":                       replace(t, `lane_key = "PID-3.1"`, `lane_key = "PID-3"`),
		"one inbound's routes swapped": replace(t,
			"[[route]]\nfrom = \"adt_in\"\nto = [\"ris\", \"lab\"]\n", "",
			"[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]", "[[route]]\nfrom = \"adt_in\"\nto = [\"ris\", \"lab\"]\n\n[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]"),
		"an outbound's address":       replace(t, `address = "lab.internal:2576"`, `address = "lab2.internal:2576"`),
		"an outbound's retry policy":  replace(t, "address = \"lab.internal:2576\"\n", "address = \"lab.internal:2576\"\nmax_attempts = 5\n"),
		"TLS turned off":              replace(t, "tls = true\ntls_ca = \"/etc/mf/node-a/ca.pem\"\n", ""),
		"a file outbound's directory": replace(t, `directory = "/srv/mf/out"`, `directory = "/srv/mf/out2"`),
		"a file inbound's directory":  replace(t, `directory = "/srv/mf/in"`, `directory = "/mnt/local/in"`),
		"an inbound's size limit":     replace(t, "listen = \"127.0.0.1:2575\"\n", "listen = \"127.0.0.1:2575\"\nmax_message_bytes = 2048\n"),
		"the row lease":               replace(t, "pool_size = 4\n", "pool_size = 4\nlease_ttl_seconds = 90\n"),
		"the retention":               replace(t, "pool_size = 4\n", "pool_size = 4\nretention_days = 30\n"),
		"the sweep":                   replace(t, "enabled = true\n", "enabled = true\nreclaim_interval_seconds = 60\n"),
	}
	for name, file := range differ {
		if got := fingerprintOf(t, file); got == base {
			t.Errorf("%s: same fingerprint as the base, want another", name)
		}
	}
}

func TestSameFormat(t *testing.T) {
	if !config.SameFormat("v1:aa", "v1:bb") || config.SameFormat("v1:aa", "v2:aa") || config.SameFormat("", "v1:aa") || config.SameFormat("", "") {
		t.Fatal("SameFormat: want true only for two fingerprints of one format")
	}
}

// client_crl is a node's own path, as client_ca is: two nodes that keep the
// CA's list under paths of their own run the same graph, but one that
// checks no CRL does not (a revoked partner it would admit once elected).
func TestGraphFingerprintKeepsWhetherClientCRLIsSet(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	caFiles["/etc/mf/node-a/ca.pem"] = p.CAFile // the base's tls_ca
	now := time.Now()
	crlA := p.WriteCRL(t, filepath.Join(dir, "a.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(24 * time.Hour)})
	crlB := p.WriteCRL(t, filepath.Join(dir, "b.crl"), enginetest.CRL{Number: 1, ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(24 * time.Hour)})
	file := func(crl string) string {
		f := strings.Replace(fingerprintBase, "listen = \"127.0.0.1:2575\"\n", "listen = \"127.0.0.1:2575\"\ntls_cert = \""+p.ServerCert+"\"\ntls_key = \""+p.ServerKey+"\"\nclient_ca = \""+p.CAFile+"\"\n", 1)
		if crl != "" {
			f = strings.Replace(f, "client_ca =", "client_crl = [\""+crl+"\"]\nclient_ca =", 1)
		}
		return f
	}
	a, b, none := fingerprintOf(t, file(crlA)), fingerprintOf(t, file(crlB)), fingerprintOf(t, file(""))
	if a != b {
		t.Errorf("client_crl under another path: fingerprint %s, want %s", b, a)
	}
	if a == none {
		t.Errorf("client_crl left out: same fingerprint as with it, want another")
	}
}
