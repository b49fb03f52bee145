package config_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
)

const minimal = `
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:2575"

[[outbound]]
name = "lab"
type = "mllp"
address = "lab.internal:2576"

[[route]]
from = "adt_in"
to = ["lab"]
lane_key = "PID-3.1"
`

func TestDefaults(t *testing.T) {
	c, err := config.Parse([]byte(minimal), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Backend != "sqlite" || c.Store.Path != "mf.db" || c.Store.PoolSize != 5 ||
		c.Store.LeaseTTL() != time.Minute || c.Store.Retention() != 7*24*time.Hour {
		t.Fatalf("store defaults: %+v", c.Store)
	}
	cl := c.Cluster
	if cl.Enabled || cl.Heartbeat() != 10*time.Second || cl.LeaderFenceTimeout() != 20*time.Second ||
		cl.LeaderLeaseTTL() != 30*time.Second || cl.NodeTimeout() != 30*time.Second || cl.ReclaimInterval() != 30*time.Second {
		t.Fatalf("cluster defaults: %+v", cl)
	}
	if c.API.Listen != "127.0.0.1:8765" {
		t.Fatalf("api defaults: %+v", c.API)
	}
	in, out := c.Inbound[0], c.Outbound[0]
	if in.MaxMessageBytes != 1<<20 || in.MaxConnections != 100 || in.IdleTimeout() != 5*time.Minute || in.ReadTimeout() != 30*time.Second ||
		in.Settle() != time.Second || in.MaxFileBytes != 64<<20 {
		t.Fatalf("inbound defaults: %+v", in)
	}
	if out.MaxAttempts != 0 || out.OnExhausted != "block" || out.RetryBase() != time.Second || out.RetryMax() != 5*time.Minute ||
		out.Timeout() != 30*time.Second || out.Connections != 1 {
		t.Fatalf("outbound defaults: %+v", out)
	}
	h, err := config.Parse([]byte(minimal+"[[outbound]]\nname = \"api\"\ntype = \"http\"\nurl = \"https://h/x\"\n"), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Outbound[1].Connections; got != config.DefaultHTTPConnections {
		t.Fatalf("an http outbound's connections default to %d, want %d", got, config.DefaultHTTPConnections)
	}
}

// A file destination creates its directory, and a file inbound its
// directories, unless told not to (a share's directory, which must not be
// made on the local disk).
func TestFileEndsCreateTheirDirectoriesUnlessToldNot(t *testing.T) {
	for _, end := range []struct {
		file string
		got  func(*config.Config) bool
	}{
		{"\n[[outbound]]\nname = \"drop\"\ntype = \"file\"\ndirectory = \"out\"\n", func(c *config.Config) bool { return c.Outbound[1].CreateDirectory }},
		{"\n[[inbound]]\nname = \"drop\"\ntype = \"file\"\ndirectory = \"in\"\n", func(c *config.Config) bool { return c.Inbound[1].CreateDirectory }},
	} {
		for _, tc := range []struct {
			toml string
			want bool
		}{{"", true}, {"create_directory = true\n", true}, {"create_directory = false\n", false}} {
			c, err := config.Parse([]byte(minimal+end.file+tc.toml), "mf.toml")
			if err != nil {
				t.Fatalf("%q: %v", end.file+tc.toml, err)
			}
			if got := end.got(c); got != tc.want {
				t.Errorf("%q: create_directory %v, want %v", end.file+tc.toml, got, tc.want)
			}
		}
	}
	// An MLLP inbound has no directory to create.
	if _, err := config.Parse([]byte(strings.Replace(minimal, "type = \"mllp\"", "type = \"mllp\"\ncreate_directory = false", 1)), "mf.toml"); err == nil ||
		!strings.Contains(err.Error(), "create_directory") {
		t.Errorf("create_directory on an mllp inbound: error %v, want one naming the key", err)
	}
}

func TestBuiltInDefaultIsValid(t *testing.T) {
	c, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Inbound) != 1 || c.Inbound[0].Listen != "127.0.0.1:2575" || c.Outbound[0].Directory != "out" {
		t.Fatalf("built-in default: %+v", c)
	}
}

// The README's quick start says the built-in config is examples/mf.toml:
// the two files must not drift apart.
func TestTheExampleConfigIsTheBuiltInDefault(t *testing.T) {
	builtIn, err := os.ReadFile("default.toml")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../examples/mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(builtIn, example) {
		t.Fatal("examples/mf.toml differs from config/default.toml, the built-in config: copy one over the other")
	}
}

// Unknown keys are errors naming the file, the line and the key.
func TestUnknownKeyNamesKeyAndFile(t *testing.T) {
	_, err := config.Parse([]byte("[store]\nbakend = \"sqlite\"\n"+minimal), "site.toml")
	if err == nil || !strings.Contains(err.Error(), "site.toml:2") || !strings.Contains(err.Error(), `"store.bakend"`) {
		t.Fatalf("got %v", err)
	}
	_, err = config.Parse([]byte(minimal+"timeout = 3\n"), "site.toml")
	if err == nil || !strings.Contains(err.Error(), `"route.timeout"`) {
		t.Fatalf("got %v", err)
	}
	_, err = config.Parse([]byte("[store]\npool_size = \"five\"\n"), "site.toml")
	if err == nil || !strings.Contains(err.Error(), "site.toml:2") {
		t.Fatalf("a wrong type: got %v", err)
	}
}

// A filter's field paths have dots, which TOML reads as nested keys unless
// the path is quoted: filter = { MSH-9.1 = "ADT" } was refused with "cannot
// decode TOML table into struct field config.Route.Filter of type string",
// which names neither the path nor the cure.
func TestAnUnquotedFilterPathIsRefusedSayingToQuoteIt(t *testing.T) {
	for _, route := range []string{
		"[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]\nfilter = { MSH-9.1 = \"ADT\" }\n",
		"[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]\n[route.filter]\nMSH-9.1 = \"ADT\"\n",
	} {
		_, err := config.Parse([]byte(minimal+route), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "site.toml:") ||
			!strings.Contains(err.Error(), `quote each field path of a filter: "MSH-9.1" = "ADT"`) {
			t.Errorf("%q: got %v", route, err)
		}
	}
}

// Each rule of DESIGN §10, refused with the file and the key named.
func TestValidationNamesTheKey(t *testing.T) {
	cases := []struct {
		name, toml, key string
	}{
		{"timing invariant", "[cluster]\nheartbeat_seconds = 25\n", "cluster: need 0 < heartbeat_seconds"},
		{"node timeout", "[cluster]\nnode_timeout_seconds = 5\n", "cluster.node_timeout_seconds"},
		{"node id too long", "[cluster]\nnode_id = \"" + strings.Repeat("n", 201) + "\"\n", "cluster.node_id"},
		{"cluster on sqlite", "[cluster]\nenabled = true\n", "cluster.enabled"},
		{"sqlite pool of one", "[store]\npool_size = 1\n", "store.pool_size: SQLite needs at least 2 connections, got 1"},
		{"cluster pool", "[store]\nbackend = \"postgres\"\nurl = \"postgres://db/mf\"\npool_size = 1\n[cluster]\nenabled = true\n", "store.pool_size"},
		{"server db without url", "[store]\nbackend = \"postgres\"\n", "store.url"},
		{"unknown backend", "[store]\nbackend = \"mysql\"\n", "store.backend"},
		{"api plaintext on the network", "[api]\nlisten = \"10.0.0.5:8765\"\n", "api.listen"},
		{"token role", "[[api.tokens]]\nname = \"g\"\nrole = \"root\"\nsha256 = \"" + strings.Repeat("a", 64) + "\"\n", "api.tokens[0].role"},
		{"token hash", "[[api.tokens]]\nname = \"g\"\nrole = \"viewer\"\nsha256 = \"abc\"\n", "api.tokens[0].sha256"},
		{"the empty string's hash", "[[api.tokens]]\nname = \"g\"\nrole = \"admin\"\nsha256 = \"E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855\"\n", "api.tokens[0].sha256: is the SHA-256 of the empty string"},
		{"one token twice", "[[api.tokens]]\nname = \"g\"\nrole = \"viewer\"\nsha256 = \"" + strings.Repeat("a", 64) + "\"\n" +
			"[[api.tokens]]\nname = \"ops\"\nrole = \"admin\"\nsha256 = \"" + strings.Repeat("A", 64) + "\"\n", "api.tokens[1].sha256: is the hash of api.tokens[0] too"},
		{"route from nowhere", "[[route]]\nfrom = \"nope\"\nto = [\"lab\"]\n", "route[1].from"},
		{"route to nowhere", "[[route]]\nfrom = \"adt_in\"\nto = [\"nope\"]\n", "route[1].to"},
		{"bad lane key", "[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]\nlane_key = \"PID3\"\n", "route[1].lane_key"},
		{"bad filter path", "[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]\nfilter = { \"MSH-x\" = \"ADT\" }\n", "route[1].filter"},
		{"timeout above the row lease", "[[outbound]]\nname = \"slow\"\ntype = \"file\"\ndirectory = \"x\"\ntimeout_seconds = 90\n", "outbound[1].timeout_seconds"},
		{"on_exhausted", "[[outbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"x\"\non_exhausted = \"drop\"\n", "outbound[1].on_exhausted"},
		{"tls settings without tls", "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\ntls_ca = \"ca.pem\"\n", "outbound[1].tls"},
		// Each HTTP case is one the sender refuses: accepted, the
		// destination would never deliver and its messages would pile up.
		{"http url without a scheme", "[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = \"api.internal/hl7\"\n", "outbound[1].url"},
		{"http url without a host", "[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = \"http:///hl7\"\n", "outbound[1].url"},
		{"tls on an http:// url", "[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = \"http://api.internal/hl7\"\ntls = true\n", "outbound[1].url: tls, tls_ca, tls_cert, tls_key and server_name need an https:// URL"},
		{"tls_key on an http:// url", "[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = \"http://api.internal/hl7\"\ntls_key = \"k.pem\"\n", "outbound[1].url: tls, tls_ca, tls_cert, tls_key and server_name need an https:// URL"},
		{"tls_cert without tls_key on https://", "[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = \"https://api.internal/hl7\"\ntls_cert = \"c.pem\"\n", "outbound[1].tls_cert: tls_cert and tls_key go together"},
		{"duplicate outbound", "[[outbound]]\nname = \"lab\"\ntype = \"file\"\ndirectory = \"x\"\n", "outbound[1].name"},
		{"destination name too long", "[[outbound]]\nname = \"" + strings.Repeat("d", 201) + "\"\ntype = \"file\"\ndirectory = \"x\"\n", "outbound[1].name"},
		// A name is a key in the store, a metric label and a log field:
		// PostgreSQL refuses a NUL in text (every ingest would fail), and
		// "lab" and "lab " would be two destinations nobody can tell apart.
		{"NUL in a destination", "[[outbound]]\nname = \"la\\u0000b\"\ntype = \"file\"\ndirectory = \"x\"\n", "outbound[1].name"},
		{"blank at a destination's end", "[[outbound]]\nname = \"lab \"\ntype = \"file\"\ndirectory = \"x\"\n", "outbound[1].name"},
		{"control character in an inbound", "[[inbound]]\nname = \"a\\tb\"\ntype = \"file\"\ndirectory = \"x\"\n", "inbound[1].name"},
		{"blank at an inbound's start", "[[inbound]]\nname = \" adt\"\ntype = \"file\"\ndirectory = \"x\"\n", "inbound[1].name"},
		{"newline in a node id", "[cluster]\nnode_id = \"a\\nb\"\n", "cluster.node_id"},
		{"blank at a token name's end", "[[api.tokens]]\nname = \"ops \"\nrole = \"viewer\"\nsha256 = \"" + strings.Repeat("a", 64) + "\"\n", "api.tokens[0].name"},
		{"slash in a destination", "[[outbound]]\nname = \"a/b\"\ntype = \"file\"\ndirectory = \"x\"\n", "outbound[1].name"},
		{"mllp inbound without tls on the network", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \":2575\"\n", "inbound[1].listen"},
		{"mutual tls without a certificate", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\nclient_ca = \"ca.pem\"\n", "inbound[1].client_ca"},
		{"client names without client_ca", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\ntls_client_names = [\"lab.example.org\"]\n", "inbound[1].tls_client_names: needs client_ca"},
		{"empty client name", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\nclient_ca = \"ca.pem\"\ntls_client_names = [\"lab.example.org\", \"\"]\n", "inbound[1].tls_client_names[1]"},
		{"file inbound without a directory", "[[inbound]]\nname = \"x\"\ntype = \"file\"\n", "inbound[1].directory"},
		{"negative settle", "[[inbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"x\"\nsettle_seconds = -1\n", "inbound[1].settle_seconds"},
		{"endless settle", "[[inbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"x\"\nsettle_seconds = inf\n", "inbound[1].settle_seconds"},
		{"max_file_bytes", "[[inbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"x\"\nmax_file_bytes = -1\n", "inbound[1].max_file_bytes"},
		{"settle not a number", "[[inbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"x\"\nsettle_seconds = nan\n", "inbound[1].settle_seconds"},
		// A string key written empty is refused as a 0 is, not run with its
		// default: an unset variable in a templated file (listen =
		// "${API_LISTEN}") would otherwise bind 127.0.0.1:8765 or store every
		// message in ./mf.db, and mf check said ok.
		{"empty api listen", "[api]\nlisten = \"\"\n", "api.listen"},
		{"empty store backend", "[store]\nbackend = \"\"\n", "store.backend"},
		{"empty store path", "[store]\npath = \"\"\n", "store.path"},
		{"in-memory store", "[store]\npath = \":memory:\"\n", "store.path: \":memory:\" is SQLite's in-memory database"},
		{"empty archive directory", "[[inbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"in\"\narchive_directory = \"\"\n", "inbound[1].archive_directory"},
		{"empty on_exhausted", "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\non_exhausted = \"\"\n", "outbound[1].on_exhausted"},
		{"empty node id", "[store]\nbackend = \"postgres\"\nurl = \"postgres://mf@db.internal/mf?sslmode=verify-full\"\n[cluster]\nenabled = true\nnode_id = \"\"\n", "cluster.node_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "site.toml") || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error %q does not name site.toml and %s", err, tc.key)
			}
		})
	}
}

// The timing invariant, heartbeat < fence timeout < lease TTL, holds on the
// durations the node runs with, not only on the numbers in the file: a
// number no time.Duration can hold (inf, or more than about 292 years) came
// out negative (the lease TTL of leader_lease_ttl_seconds = inf was
// -2562047h: every election found the lease expired, and a standby took it
// from a leader still inside its trust window), and one under a nanosecond
// came out 0. The same goes for the other [cluster] and [store] times: a
// retention_days of 999999 ("keep for ever") was a negative retention, and
// the leader's purge deleted every finished row and every node's row.
func TestTheTimingInvariantIsEnforcedAtLoad(t *testing.T) {
	invariant := "cluster: need 0 < heartbeat_seconds"
	cases := []struct {
		name, toml, want string
	}{
		{"heartbeat equal to the fence timeout", "[cluster]\nheartbeat_seconds = 20\n", invariant},
		{"fence timeout equal to the lease ttl", "[cluster]\nleader_fence_timeout_seconds = 30\n", invariant},
		{"fence timeout above the lease ttl", "[cluster]\nleader_fence_timeout_seconds = 40\n", invariant},
		{"lease ttl below the heartbeat", "[cluster]\nleader_lease_ttl_seconds = 5\n", invariant},
		{"endless lease ttl", "[cluster]\nleader_lease_ttl_seconds = inf\n", "cluster.leader_lease_ttl_seconds"},
		{"lease ttl beyond a duration", "[cluster]\nleader_lease_ttl_seconds = 1e12\n", "cluster.leader_lease_ttl_seconds"},
		{"timings under a nanosecond", "[cluster]\nheartbeat_seconds = 1e-12\nleader_fence_timeout_seconds = 2e-12\nleader_lease_ttl_seconds = 3e-12\n", invariant},
		{"endless node timeout", "[cluster]\nnode_timeout_seconds = inf\n", "cluster.node_timeout_seconds"},
		{"endless reclaim interval", "[cluster]\nreclaim_interval_seconds = inf\n", "cluster.reclaim_interval_seconds"},
		{"reclaim interval under a nanosecond", "[cluster]\nreclaim_interval_seconds = 1e-12\n", "cluster.reclaim_interval_seconds"},
		{"endless row lease", "[store]\nlease_ttl_seconds = inf\n", "store.lease_ttl_seconds"},
		{"retention beyond a duration", "[store]\nretention_days = 999999\n", "store.retention_days"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
			if err == nil {
				t.Fatalf("accepted: heartbeat %v, fence timeout %v, lease ttl %v, node timeout %v, reclaim %v, row lease %v, retention %v",
					c.Cluster.Heartbeat(), c.Cluster.LeaderFenceTimeout(), c.Cluster.LeaderLeaseTTL(), c.Cluster.NodeTimeout(),
					c.Cluster.ReclaimInterval(), c.Store.LeaseTTL(), c.Store.Retention())
			}
			if !strings.Contains(err.Error(), "site.toml") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name site.toml and %s", err, tc.want)
			}
		})
	}
	// The largest values a duration holds are still taken.
	if _, err := config.Parse([]byte(minimal+"[store]\nretention_days = 36500\nlease_ttl_seconds = 86400\n[cluster]\nleader_lease_ttl_seconds = 3600\nnode_timeout_seconds = 3600\n"), "site.toml"); err != nil {
		t.Fatalf("a century of retention and an hour's lease refused: %v", err)
	}
}

// The inbound and outbound times too must fit the time.Duration the engine
// counts them in: inf or 1e12 came out negative (every MLLP connection's
// deadline already past, a destination's backoff of no time at all, a lane
// retrying in a hot loop), and a number under a nanosecond came out 0.
func TestInboundAndOutboundTimesFitTheEngine(t *testing.T) {
	const (
		mllpIn  = "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\n"
		fileIn  = "[[inbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"in\"\n"
		mllpOut = "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\n"
	)
	for _, tc := range []struct{ name, toml, want string }{
		{"endless idle timeout", mllpIn + "idle_timeout_seconds = inf\n", "inbound[1].idle_timeout_seconds"},
		{"read timeout beyond a duration", mllpIn + "read_timeout_seconds = 1e12\n", "inbound[1].read_timeout_seconds"},
		{"read timeout under a nanosecond", mllpIn + "read_timeout_seconds = 1e-12\n", "inbound[1]"},
		{"endless poll interval", fileIn + "poll_interval_seconds = inf\n", "inbound[1].poll_interval_seconds"},
		{"settle beyond a duration", fileIn + "settle_seconds = 1e12\n", "inbound[1].settle_seconds"},
		{"endless retry max", mllpOut + "retry_max_seconds = inf\n", "outbound[1].retry_max_seconds"},
		{"retry max beyond a duration", mllpOut + "retry_max_seconds = 1e12\n", "outbound[1].retry_max_seconds"},
		{"retry base under a nanosecond", mllpOut + "retry_base_seconds = 1e-12\n", "retry_base_seconds"},
		{"delivery timeout under a nanosecond", mllpOut + "timeout_seconds = 1e-12\n", "outbound[1].timeout_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
			if err == nil {
				in, out := c.Inbound[len(c.Inbound)-1], c.Outbound[len(c.Outbound)-1]
				t.Fatalf("accepted: idle %v, read %v, poll %v, settle %v, retry base %v, retry max %v, timeout %v",
					in.IdleTimeout(), in.ReadTimeout(), in.PollInterval(), in.Settle(), out.RetryBase(), out.RetryMax(), out.Timeout())
			}
			if !strings.Contains(err.Error(), "site.toml") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name site.toml and %s", err, tc.want)
			}
		})
	}
	// A day's backoff and an hour's idle connection are still taken.
	if _, err := config.Parse([]byte(minimal+mllpIn+"idle_timeout_seconds = 3600\n"+mllpOut+"retry_max_seconds = 86400\n"), "site.toml"); err != nil {
		t.Fatalf("refused: %v", err)
	}
}

// An outbound URL may carry credentials (user:password@, ?api_key=); a
// config error, printed and logged, shows the URL without them.
func TestURLErrorsShowNoCredentials(t *testing.T) {
	for _, url := range []string{
		"ftp://mf:S3cretPW@api.internal/hl7?api_key=TOKEN123",
		"http://mf:S3cretPW@/hl7?api_key=TOKEN123",
		"http://mf:S3cretPW@api.internal/h%zz?api_key=TOKEN123", // url.Parse's error quotes it all
	} {
		_, err := config.Parse([]byte(minimal+"[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = \""+url+"\"\n"), "site.toml")
		if err == nil {
			t.Fatalf("%s: accepted", url)
		}
		if !strings.Contains(err.Error(), "outbound[1].url") {
			t.Errorf("error %q does not name outbound[1].url", err)
		}
		for _, secret := range []string{"S3cretPW", "TOKEN123", "@"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q shows %s", err, secret)
			}
		}
	}
	if got := config.CleanURL("https://mf:S3cretPW@api.internal:8443/hl7/in?api_key=TOKEN123#x"); got != "https://api.internal:8443/hl7/in" {
		t.Errorf("CleanURL = %q", got)
	}
}

// settle_seconds = 0 is kept (read a file at once), not taken for no value.
func TestFileInboundSettleZeroIsKept(t *testing.T) {
	c, err := config.Parse([]byte(minimal+"[[inbound]]\nname = \"drop\"\ntype = \"file\"\ndirectory = \"in\"\nsettle_seconds = 0\n"), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Inbound[1].Settle(); got != 0 {
		t.Fatalf("settle_seconds = 0 read as %v", got)
	}
}

func TestClusterOnAServerDatabaseIsValid(t *testing.T) {
	_, err := config.Parse([]byte(`
[store]
backend = "postgres"
url = "postgres://db.internal/mf"
[cluster]
enabled = true
heartbeat_seconds = 0.2
leader_fence_timeout_seconds = 0.5
leader_lease_ttl_seconds = 1.0
node_timeout_seconds = 1.0
`+minimal), "cluster.toml")
	if err != nil {
		t.Fatal(err)
	}
}

// The settings that weaken safety on purpose are each reported for a WARN
// at start; a safe config reports none.
func TestWarningsNameTheWeakenedSettings(t *testing.T) {
	safe := strings.Replace(minimal, `address = "lab.internal:2576"`, "address = \"lab.internal:2576\"\ntls = true", 1) +
		"[[outbound]]\nname = \"local\"\ntype = \"mllp\"\naddress = \"127.0.0.1:2577\"\n" +
		"[[outbound]]\nname = \"web\"\ntype = \"http\"\nurl = \"https://emr.internal/hl7\"\n" +
		"[[route]]\nfrom = \"adt_in\"\nto = [\"local\", \"web\"]\n"
	c, err := config.Parse([]byte(safe), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 0 || c.LogPayloads {
		t.Fatalf("a safe config warns %q (log_payloads %v)", w, c.LogPayloads)
	}
	risky := "log_payloads = true\n" + strings.Replace(minimal, `listen = "127.0.0.1:2575"`, "listen = \"0.0.0.0:2575\"\nallow_plaintext = true", 1) +
		"[[outbound]]\nname = \"web\"\ntype = \"http\"\nurl = \"http://user:pw@emr.internal/hl7?k=secret\"\n"
	c, err = config.Parse([]byte(risky), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{
		"inbound[0].listen: 0.0.0.0:2575 accepts plaintext", "log_payloads = true",
		"outbound[0] (lab): sends to lab.internal:2576 in plaintext (tls = false)",
		"outbound[1] (web): posts to emr.internal in plaintext (http://)",
	} {
		if !c.LogPayloads || !strings.Contains(w, want) {
			t.Fatalf("warnings lack %q: %q", want, w)
		}
	}
	if strings.Contains(w, "pw") || strings.Contains(w, "secret") {
		t.Fatalf("a warning shows the url's credentials: %q", w)
	}
}

// A key written as 0 is an error, not the default: the file says 0, and an
// operator who wrote pool_size = 0 or idle_timeout_seconds = 0 (no idle
// limit?) must not get 5 or 300 without a word, nor an error that quotes the
// default as if the file held it.
func TestAnExplicitZeroIsNotTakenForTheDefault(t *testing.T) {
	cases := []struct {
		name, toml, want string
	}{
		{"pool size", "[store]\npool_size = 0\n", "store.pool_size: must be at least 1, got 0"},
		{"row lease", "[store]\nlease_ttl_seconds = 0\n", "store.lease_ttl_seconds: must be positive, got 0"},
		{"retention", "[store]\nretention_days = 0\n", "store.retention_days: must be positive, got 0"},
		{"heartbeat", "[cluster]\nheartbeat_seconds = 0\nleader_fence_timeout_seconds = 0.5\nleader_lease_ttl_seconds = 1.0\n", "need 0 < heartbeat_seconds (0)"},
		{"reclaim", "[cluster]\nreclaim_interval_seconds = 0.0\n", "cluster.reclaim_interval_seconds: must be positive, got 0"},
		{"max connections", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\nmax_connections = 0\n", "inbound[1].max_connections: must be at least 1, got 0"},
		{"idle timeout", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\nidle_timeout_seconds = 0\n", "inbound[1]: idle_timeout_seconds, read_timeout_seconds and poll_interval_seconds must be positive"},
		{"max message bytes", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\nmax_message_bytes = 0\n", "inbound[1].max_message_bytes: must be at least 64, got 0"},
		{"delivery timeout", "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\ntimeout_seconds = 0\n", "outbound[1].timeout_seconds: must be positive"},
		{"outbound connections", "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\nconnections = 0\n", "outbound[1].connections: must be at least 1, got 0"},
		{"http outbound connections", "[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = \"https://h/x\"\nconnections = 0\n", "outbound[1].connections: must be at least 1, got 0"},
		{"retry base", "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\nretry_base_seconds = 0\n", "need 0 < retry_base_seconds (0)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "site.toml") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// A store url may carry the password (postgres://mf:pw@db/mf), and the
// store uses it when MF_STORE_PASSWORD is unset: mf run warns, naming the
// key but not the password, since the file is then a secret.
func TestAPasswordInTheStoreURLIsWarnedOf(t *testing.T) {
	for _, u := range []string{
		"postgres://mf:S3cretPW@db.internal:5432/mf?sslmode=verify-full",
		"postgres://mf@db.internal:5432/mf?password=S3cretPW",
		"sqlserver://sa:S3cretPW@db.internal:1433?database=mf",
	} {
		backend := strings.SplitN(u, ":", 2)[0]
		c, err := config.Parse([]byte("[store]\nbackend = \""+backend+"\"\nurl = \""+u+"\"\n"+minimal), "mf.toml")
		if err != nil {
			t.Fatal(err)
		}
		w := strings.Join(c.Warnings(), "\n")
		if !strings.Contains(w, "store.url") || !strings.Contains(w, "MF_STORE_PASSWORD") {
			t.Errorf("%s: warnings %q do not name store.url and MF_STORE_PASSWORD", u, w)
		}
		if strings.Contains(w, "S3cretPW") {
			t.Errorf("%s: warnings %q show the password", u, w)
		}
	}
	c, err := config.Parse([]byte("[store]\nbackend = \"postgres\"\nurl = \"postgres://mf@db.internal/mf\"\n"+minimal), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.Warnings(), "\n"); strings.Contains(w, "store.url") {
		t.Fatalf("a url without a password warns %q", w)
	}
}

// The TLS files a config names are read, and each certificate loaded with
// its key, when the config is checked: a file that is missing, or a
// certificate that is not its key's, failed only at mf run (a listener or
// the API not served, a destination's lanes not delivering), after mf check
// had said ok. The error names the key and the path.
// Transport security fails closed (reference 001): the API and an MLLP
// listener without TLS may bind loopback only, unless allow_plaintext says
// otherwise; every other address, every interface included, is refused, and
// with TLS any address is taken.
func TestOnlyLoopbackListensWithoutTLS(t *testing.T) {
	p := enginetest.NewPKI(t, t.TempDir())
	listeners := map[string]func(addr, more string) string{
		"api.listen": func(addr, more string) string { return fmt.Sprintf("[api]\nlisten = %q\n%s", addr, more) },
		"inbound[1].listen": func(addr, more string) string {
			return fmt.Sprintf("[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = %q\n%s", addr, more)
		},
	}
	// Not minimal's port, which a second listener may not share.
	loopback := []string{"127.0.0.1:2580", "127.8.9.10:2580", "[::1]:2580", "localhost:2580", "LOCALHOST:2580", "[::ffff:127.0.0.1]:2580"}
	network := []string{"0.0.0.0:2580", ":2580", "[::]:2580", "10.0.0.5:2580", "mf.internal:2580", "[fe80::1%eth0]:2580", "[::ffff:10.0.0.5]:2580"}
	tls := fmt.Sprintf("tls_cert = %q\ntls_key = %q\n", p.ServerCert, p.ServerKey)
	for key, listener := range listeners {
		for _, addr := range loopback {
			if _, err := config.Parse([]byte(minimal+listener(addr, "")), "site.toml"); err != nil {
				t.Errorf("%s = %q without TLS: %v; want it taken (loopback)", key, addr, err)
			}
		}
		for _, addr := range network {
			_, err := config.Parse([]byte(minimal+listener(addr, "")), "site.toml")
			if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "allow_plaintext") {
				t.Errorf("%s = %q without TLS: %v; want a refusal naming %s and allow_plaintext", key, addr, err, key)
			}
			for _, more := range []string{"allow_plaintext = true\n", tls} {
				if _, err := config.Parse([]byte(minimal+listener(addr, more)), "site.toml"); err != nil {
					t.Errorf("%s = %q with %q: %v; want it taken", key, addr, more, err)
				}
			}
		}
	}
}

func TestTLSFilesAreLoadedWhenChecked(t *testing.T) {
	p := enginetest.NewPKI(t, t.TempDir())
	other := enginetest.NewPKI(t, t.TempDir())
	missing := filepath.Join(t.TempDir(), "missing.pem")
	q := func(path string) string { return "\"" + path + "\"" }
	api := func(cert, key string) string { return "[api]\ntls_cert = " + q(cert) + "\ntls_key = " + q(key) + "\n" }
	inbound := func(cert, key, ca string) string {
		return "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\ntls_cert = " + q(cert) + "\ntls_key = " + q(key) + "\nclient_ca = " + q(ca) + "\n"
	}
	mllp := func(ca, cert, key string) string {
		return "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\ntls = true\ntls_ca = " + q(ca) + "\ntls_cert = " + q(cert) + "\ntls_key = " + q(key) + "\n"
	}
	https := func(ca, cert, key string) string {
		return "[[outbound]]\nname = \"y\"\ntype = \"http\"\nurl = \"https://h/x\"\ntls_ca = " + q(ca) + "\ntls_cert = " + q(cert) + "\ntls_key = " + q(key) + "\n"
	}
	valid := api(p.ServerCert, p.ServerKey) + inbound(p.ServerCert, p.ServerKey, p.CAFile) + mllp(p.CAFile, p.ServerCert, p.ServerKey) + https(p.CAFile, p.ServerCert, p.ServerKey)
	if _, err := config.Parse([]byte(minimal+valid), "site.toml"); err != nil {
		t.Fatalf("TLS files that load: %v", err)
	}
	for _, tc := range []struct{ name, toml, want string }{
		{"api cert missing", api(missing, p.ServerKey), "api.tls_cert: open " + missing},
		{"api key missing", api(p.ServerCert, missing), "api.tls_key: open " + missing},
		{"api cert not its key's", api(p.ServerCert, other.ServerKey), "api.tls_cert: " + p.ServerCert + " with tls_key " + other.ServerKey + ": not a PEM certificate and its private key: tls: private key does not match public key"},
		{"inbound cert missing", inbound(missing, p.ServerKey, p.CAFile), "inbound[1].tls_cert: open " + missing},
		{"inbound key not PEM", inbound(p.ServerCert, p.CAFile, p.CAFile), "inbound[1].tls_cert: " + p.ServerCert + " with tls_key " + p.CAFile},
		{"inbound client_ca missing", inbound(p.ServerCert, p.ServerKey, missing), "inbound[1].client_ca: open " + missing},
		{"inbound client_ca no certificate", inbound(p.ServerCert, p.ServerKey, p.ServerKey), "inbound[1].client_ca: " + p.ServerKey + " holds no PEM certificate"},
		{"mllp tls_ca missing", mllp(missing, p.ServerCert, p.ServerKey), "outbound[1].tls_ca: open " + missing},
		{"mllp key missing", mllp(p.CAFile, p.ServerCert, missing), "outbound[1].tls_key: open " + missing},
		{"https cert not its key's", https(p.CAFile, p.ServerCert, other.ServerKey), "outbound[1].tls_cert: " + p.ServerCert + " with tls_key " + other.ServerKey},
		{"https tls_ca no certificate", https(p.ServerKey, p.ServerCert, p.ServerKey), "outbound[1].tls_ca: " + p.ServerKey + " holds no PEM certificate"},
	} {
		_, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "site.toml: "+tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, "site.toml: "+tc.want)
		}
	}
}

// A key that only another type reads is refused, naming the key, the type
// and the type that reads it: it has no effect, and the operator who wrote
// it expects one. address on a file outbound, url with backend = "sqlite"
// and the like were accepted and ignored.
func TestAKeyOfAnotherTypeIsRefused(t *testing.T) {
	const fileOut = "[[outbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"out\"\n"
	const fileIn = "[[inbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"in\"\n"
	for _, tc := range []struct{ name, toml, want string }{
		{"address on a file outbound", fileOut + "address = \"lab:2576\"\n", `outbound[1].address: has no effect with type = "file" (only type = "mllp" reads it)`},
		{"url on a file outbound", fileOut + "url = \"https://h/x\"\n", `outbound[1].url: has no effect with type = "file" (only type = "http" reads it)`},
		{"tls on a file outbound", fileOut + "tls = false\n", `outbound[1].tls: has no effect with type = "file" (only type = "http" or "mllp" reads it)`},
		{"directory on an mllp outbound", "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\ndirectory = \"out\"\n", `outbound[1].directory: has no effect with type = "mllp" (only type = "file" reads it)`},
		{"create_directory on an mllp outbound", "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\ncreate_directory = false\n", `outbound[1].create_directory: has no effect with type = "mllp" (only type = "file" reads it)`},
		{"connections on a file outbound", fileOut + "connections = 4\n", `outbound[1].connections: has no effect with type = "file" (only type = "http" or "mllp" reads it)`},
		{"listen on a file inbound", fileIn + "listen = \"127.0.0.1:1\"\n", `inbound[1].listen: has no effect with type = "file" (only type = "mllp" reads it)`},
		{"max_connections on a file inbound", fileIn + "max_connections = 5\n", `inbound[1].max_connections: has no effect with type = "file"`},
		{"settle_seconds on an mllp inbound", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\nsettle_seconds = 2\n", `inbound[1].settle_seconds: has no effect with type = "mllp" (only type = "file" reads it)`},
		{"url with sqlite", "[store]\nurl = \"postgres://db/mf\"\n", `store.url: has no effect with backend = "sqlite" (only backend = "postgres" or "sqlserver" reads it)`},
		{"path with postgres", "[store]\nbackend = \"postgres\"\nurl = \"postgres://db/mf\"\npath = \"mf.db\"\n", `store.path: has no effect with backend = "postgres" (only backend = "sqlite" reads it)`},
	} {
		_, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "site.toml: "+tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, "site.toml: "+tc.want)
		}
	}
	// Keys every type reads stay accepted.
	ok := minimal + fileIn + "max_message_bytes = 4096\n" + fileOut + "timeout_seconds = 5\nmax_attempts = 3\n"
	if _, err := config.Parse([]byte(ok), "site.toml"); err != nil {
		t.Fatalf("keys every type reads: %v", err)
	}
}

// A reload runs on the reloaded file's sections but [store], [cluster] and
// [api], which stay as the node started; the outbounds of the file are
// checked again against the row lease in force.
func TestAReloadIsCheckedAgainstTheSectionsInForce(t *testing.T) {
	started, err := config.Parse([]byte("[store]\nlease_ttl_seconds = 60\n[cluster]\nreclaim_interval_seconds = 30\n"+minimal), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	longer := "[store]\nlease_ttl_seconds = 120\n[cluster]\nreclaim_interval_seconds = 5\n" + minimal
	reloaded, err := config.Parse([]byte(longer), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.InForce(started, reloaded)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != started.Store || c.Cluster != started.Cluster || c.Outbound[0].Name != "lab" {
		t.Fatalf("in force: store %+v, cluster %+v; want the started ones", c.Store, c.Cluster)
	}
	slow, err := config.Parse([]byte(longer+"[[outbound]]\nname = \"slow\"\ntype = \"file\"\ndirectory = \"x\"\ntimeout_seconds = 90\n"), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.InForce(started, slow); err == nil || !strings.Contains(err.Error(), "outbound[1].timeout_seconds") || !strings.Contains(err.Error(), "started with") {
		t.Fatalf("a reloaded outbound timeout of 90 s under the started row lease of 60 s: %v; want it refused, saying why", err)
	}
}

// An http outbound's url needs a port from 1 to 65535 too, when it names
// one: http://h:99999/ was taken, and every send failed before it wrote
// anything, so counted no attempt, for ever.
func TestAnHTTPOutboundsPortIsFrom1To65535(t *testing.T) {
	for _, tc := range []struct{ url, why string }{
		{"http://127.0.0.1:99999/hl7", "99999 is above 65535"},
		{"http://127.0.0.1:0/hl7", "no receiver listens on port 0"},
		{"https://emr.example.org:70000/hl7", "70000 is above 65535"},
		{"http://emr.example.org:/hl7", "no port after the colon"},
	} {
		_, err := config.Parse([]byte(minimal+fmt.Sprintf("[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = %q\n", tc.url)), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "outbound[1].url") || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("url = %q: error %v; want outbound[1].url refused: %s", tc.url, err, tc.why)
		}
	}
	for _, url := range []string{"http://127.0.0.1:8080/hl7", "https://emr.example.org/hl7", "http://[::1]:443/"} {
		if _, err := config.Parse([]byte(minimal+fmt.Sprintf("[[outbound]]\nname = \"x\"\ntype = \"http\"\nurl = %q\n", url)), "site.toml"); err != nil {
			t.Errorf("url = %q: %v; want it taken", url, err)
		}
	}
}

// A listen address and an outbound address need a port that is a decimal
// number from 1 to 65535: net.SplitHostPort alone took an empty port, 0,
// 99999, -5 and a name, which failed only at start or at the first send;
// and a listen on port 0 bound a port of the kernel's choosing, another at
// every start, that no sender could be told. mf send --to and mf bench
// --target take the same check (CheckHostPort).
func TestPortsAreNumbersFrom1To65535(t *testing.T) {
	keys := map[string]func(addr string) string{
		"api.listen": func(addr string) string { return fmt.Sprintf("[api]\nlisten = %q\nallow_plaintext = true\n", addr) },
		"inbound[1].listen": func(addr string) string {
			return fmt.Sprintf("[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = %q\nallow_plaintext = true\n", addr)
		},
		"outbound[1].address": func(addr string) string {
			return fmt.Sprintf("[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = %q\n", addr)
		},
	}
	for _, tc := range []struct{ addr, why string }{
		{"127.0.0.1:", "no port after the colon"},
		{"127.0.0.1:0", ""}, // explained below
		{"127.0.0.1:99999", "99999 is above 65535"},
		{"127.0.0.1:-5", `the port "-5" is not a decimal number`},
		{"127.0.0.1:+5", `the port "+5" is not a decimal number`},
		{"localhost:abc", `the port "abc" is not a decimal number`},
		{"10.0.0.1:70000", "70000 is above 65535"},
		{"10.0.0.1:99999999999999999999", "99999999999999999999 is above 65535"},
	} {
		for key, file := range keys {
			_, err := config.Parse([]byte(minimal+file(tc.addr)), "site.toml")
			want := fmt.Sprintf("site.toml: %s: want host:port with a port from 1 to 65535, got %q: %s", key, tc.addr, tc.why)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s = %q: error %v; want one containing %q", key, tc.addr, err, want)
			}
		}
	}
	// Port 0 is explained as each use has it.
	if err := config.CheckHostPort("127.0.0.1:0", true); err == nil || !strings.Contains(err.Error(), "a port of the kernel's choosing, another at every start") {
		t.Errorf("a listen on port 0: %v", err)
	}
	if err := config.CheckHostPort("127.0.0.1:0", false); err == nil || !strings.Contains(err.Error(), "no receiver listens on port 0") {
		t.Errorf("an address of port 0: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:1", "127.0.0.1:65535", "[::1]:2590", "localhost:02590"} {
		for key, file := range keys {
			if _, err := config.Parse([]byte(minimal+file(addr)), "site.toml"); err != nil {
				t.Errorf("%s = %q: %v; want it taken", key, addr, err)
			}
		}
	}
}

// Two listeners of one config on one port were accepted, and the second
// failed to bind at start: two inbounds on one listen, an inbound on the
// API's. A port is one listener's when the hosts are the same or either
// binds every interface; both keys are named.
func TestListenersMayNotShareAPort(t *testing.T) {
	inbound := func(addr string) string {
		return fmt.Sprintf("[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = %q\nallow_plaintext = true\n", addr)
	}
	api := func(addr string) string { return fmt.Sprintf("[api]\nlisten = %q\nallow_plaintext = true\n", addr) }
	for _, tc := range []struct{ name, toml, want string }{
		{"two inbounds on one listen", inbound("127.0.0.1:2575"), `inbound[1].listen: "127.0.0.1:2575" and inbound[0].listen ("127.0.0.1:2575") both bind port 2575: one would fail to bind at start`},
		{"an inbound on the api's listen", inbound("127.0.0.1:8765"), `inbound[1].listen: "127.0.0.1:8765" and api.listen ("127.0.0.1:8765") both bind port 8765`},
		{"every interface", inbound("0.0.0.0:2575"), `inbound[1].listen: "0.0.0.0:2575" and inbound[0].listen ("127.0.0.1:2575") both bind port 2575 ("0.0.0.0:2575" binds it on every interface)`},
		{"an empty host", inbound(":2575"), `inbound[1].listen: ":2575" and inbound[0].listen ("127.0.0.1:2575") both bind port 2575 (":2575" binds it on every interface)`},
		{"every IPv6 interface", inbound("[::]:2575"), `inbound[1].listen: "[::]:2575" and inbound[0].listen`},
		{"localhost", inbound("localhost:2575"), `inbound[1].listen: "localhost:2575" and inbound[0].listen ("127.0.0.1:2575") both bind port 2575`},
		{"localhost in capitals", inbound("LocalHost:2575"), `inbound[1].listen: "LocalHost:2575" and inbound[0].listen ("127.0.0.1:2575") both bind port 2575`},
		{"one address written two ways", inbound("[::ffff:127.0.0.1]:2575"), `inbound[1].listen: "[::ffff:127.0.0.1]:2575" and inbound[0].listen`},
		{"the api on every interface", api("0.0.0.0:2575"), `inbound[0].listen: "127.0.0.1:2575" and api.listen ("0.0.0.0:2575") both bind port 2575 ("0.0.0.0:2575" binds it on every interface)`},
	} {
		_, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "site.toml: "+tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, "site.toml: "+tc.want)
		}
	}
	// Another host, or another port, is another listener's.
	for _, toml := range []string{inbound("127.0.0.2:2575"), inbound("127.0.0.1:2576"), inbound("[::1]:2575"), api("127.0.0.1:2576")} {
		if _, err := config.Parse([]byte(minimal+toml), "site.toml"); err != nil {
			t.Errorf("%q: %v; want it taken", toml, err)
		}
	}
}

// A directory a file inbound reads must not receive what mf writes: an
// archive_directory that is the inbound's directory re-ingested the same
// file every poll, and a file outbound writing into an inbound's directory
// fed that inbound (routed back, 3 messages became 33 files in 5 s). Two
// file outbounds in one directory: each one's sweep of leftover temporary
// files at its first send could remove the other's file mid-write. Paths
// compare cleaned and absolute.
func TestFileDirectoriesThatFeedAnInboundOrEachOtherAreRefused(t *testing.T) {
	abs, err := filepath.Abs("in")
	if err != nil {
		t.Fatal(err)
	}
	fileIn := func(dir, more string) string {
		return fmt.Sprintf("[[inbound]]\nname = %q\ntype = \"file\"\ndirectory = %q\n%s", "in_"+filepath.Base(dir), dir, more)
	}
	fileOut := func(name, dir string) string {
		return fmt.Sprintf("[[outbound]]\nname = %q\ntype = \"file\"\ndirectory = %q\n", name, dir)
	}
	for _, tc := range []struct{ name, toml, want string }{
		{"archive into the directory", fileIn("in", "archive_directory = \"in\"\n"), `inbound[1].archive_directory: "in" is this inbound's directory too: each file archived would be read again at the next poll`},
		{"archive into the directory written another way", fileIn("in", "archive_directory = \"./in/\"\n"), `inbound[1].archive_directory: "./in/" is this inbound's directory too`},
		{"archive into the absolute directory", fileIn("in", fmt.Sprintf("archive_directory = %q\n", abs)), fmt.Sprintf("inbound[1].archive_directory: %q is this inbound's directory too", abs)},
		{"an outbound into an inbound's directory", fileIn("in", "") + fileOut("drop", "./in"), `outbound[1].directory: "./in" is inbound[1].directory: every message written there would be read in again by that inbound`},
		{"an outbound into an inbound's absolute directory", fileIn("in", "") + fileOut("drop", abs), fmt.Sprintf("outbound[1].directory: %q is inbound[1].directory", abs)},
		{"two outbounds in one directory", fileOut("a", "out") + fileOut("b", "out/"), `outbound[2].directory: "out/" is outbound[1].directory too: each destination removes the temporary files it finds there at its first send`},
		{"two inbounds on one directory", fileIn("in", "") + strings.Replace(fileIn("./in", ""), `name = "in_in"`, `name = "in_2"`, 1), `inbound[2].directory: "./in" is inbound[1].directory too: both inbounds would read each file`},
		{"archive into another inbound's directory", fileIn("in", "archive_directory = \"other\"\n") + fileIn("other", ""), `inbound[1].archive_directory: "other" is inbound[2].directory: each file archived would be read again by that inbound`},
	} {
		_, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "site.toml: "+tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, "site.toml: "+tc.want)
		}
	}
	// Directories of their own, the default archive among them, are taken;
	// so is an outbound writing into an archive, which nothing reads.
	ok := minimal + fileIn("in", "") + fileIn("in2", "archive_directory = \"done\"\n") + fileOut("a", "out") + fileOut("b", "in/archive") + fileOut("c", "done")
	if _, err := config.Parse([]byte(ok), "site.toml"); err != nil {
		t.Fatalf("directories of their own: %v", err)
	}

	// Nor may the SQLite store, or the config file, lie in a directory a
	// file inbound reads: it took mf.db and mf.db-shm for messages and
	// moved them to its archive under the running engine, which started on
	// an empty store next time.
	for _, tc := range []struct{ name, toml, file, want string }{
		{"the store in an inbound's directory", "[store]\npath = \"in/mf.db\"\n" + fileIn("in", ""), "site.toml", `store.path: "in/mf.db" lies in the directory of inbound[1].directory, which takes every file there for messages`},
		{"the default store in the directory read", fileIn(".", ""), "elsewhere/site.toml", `store.path: "mf.db" lies in the directory of inbound[1].directory`},
		{"the config in an inbound's directory", fileIn("in", ""), "in/site.toml", "inbound: this config file (in/site.toml) lies in the directory of inbound[1].directory"},
	} {
		_, err := config.Parse([]byte(minimal+tc.toml), tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := config.Parse([]byte(minimal+"[store]\npath = \"in/archive/mf.db\"\n"+fileIn("in", "")), "site.toml"); err != nil {
		t.Errorf("the store in a directory no inbound reads: %v", err)
	}
}

// max_file_bytes = 9223372036854775807 overflowed the read's limit of
// max_file_bytes+1, and the inbound read nothing and said nothing; a file is
// read whole into memory and stored in one transaction, so the bound is
// 512 MiB, as for max_message_bytes (PostgreSQL takes at most 1 GB at
// once). connections = 1099511627776 ran mf run out of memory at start, and
// pool_size = 2147483648 was cut to an int32 on PostgreSQL (and became the
// default 5).
func TestCountsHaveAnUpperBound(t *testing.T) {
	const (
		fileIn  = "[[inbound]]\nname = \"x\"\ntype = \"file\"\ndirectory = \"in\"\n"
		mllpOut = "[[outbound]]\nname = \"x\"\ntype = \"mllp\"\naddress = \"h:1\"\n"
	)
	for _, tc := range []struct{ name, toml, want string }{
		{"max_file_bytes of the largest int64", fileIn + "max_file_bytes = 9223372036854775807\n", "inbound[1].max_file_bytes: must be at most 536870912 (512 MiB: a file is read whole into memory, and stored in one transaction), got 9223372036854775807"},
		{"max_file_bytes above 512 MiB", fileIn + "max_file_bytes = 536870913\n", "inbound[1].max_file_bytes: must be at most 536870912"},
		{"max_message_bytes above 512 MiB", fileIn + "max_message_bytes = 536870913\n", "inbound[1].max_message_bytes: must be at most 536870912 (512 MiB: the largest message every store can take), got 536870913"},
		{"max_message_bytes of a gigabyte, mllp", "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:2576\"\nmax_message_bytes = 1073741824\n", "inbound[1].max_message_bytes: must be at most 536870912"},
		{"a terabyte of connections", mllpOut + "connections = 1099511627776\n", "outbound[1].connections: must be at most 1000, got 1099511627776"},
		{"1001 connections", mllpOut + "connections = 1001\n", "outbound[1].connections: must be at most 1000, got 1001"},
		{"a pool beyond an int32", "[store]\npool_size = 2147483648\n", "store.pool_size: must be at most 1000 (database connections), got 2147483648"},
		{"a pool of 1001", "[store]\nbackend = \"postgres\"\nurl = \"postgres://db/mf\"\npool_size = 1001\n", "store.pool_size: must be at most 1000 (database connections), got 1001"},
	} {
		_, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "site.toml: "+tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, "site.toml: "+tc.want)
		}
	}
	at := minimal + "[store]\npool_size = 1000\n" + fileIn + "max_file_bytes = 536870912\nmax_message_bytes = 536870912\n" + mllpOut + "connections = 1000\n"
	if _, err := config.Parse([]byte(at), "site.toml"); err != nil {
		t.Fatalf("each count at its bound: %v", err)
	}
}

// A password in a connection string of keys and values (PostgreSQL's
// "host=db password=…", SQL Server's "server=db;password=…") drew no
// warning, unlike one in a postgres:// URL; the warning never shows it.
func TestAPasswordInAConnectionStringIsWarnedOf(t *testing.T) {
	for _, tc := range []struct{ backend, url string }{
		{"postgres", "host=db user=u password=S3cretPW sslmode=require"},
		{"postgres", "host=db user=u PASSWORD = 'S3cretPW' sslmode=require"},
		{"postgres", "password=S3cretPW host=db"},
		{"sqlserver", "server=db;user id=sa;password=S3cretPW;encrypt=strict"},
		{"sqlserver", "server=db; User ID=sa; Pwd = S3cretPW; encrypt=strict"},
		{"sqlserver", "odbc:server=db;uid=sa;pwd={S3cretPW};encrypt=strict"},
	} {
		c, err := config.Parse([]byte(fmt.Sprintf("[store]\nbackend = %q\nurl = %q\n%s", tc.backend, tc.url, minimal)), "mf.toml")
		if err != nil {
			t.Fatal(err)
		}
		w := strings.Join(c.Warnings(), "\n")
		if !strings.Contains(w, "store.url carries a password") || !strings.Contains(w, "MF_STORE_PASSWORD") {
			t.Errorf("%s: warnings %q do not name store.url and MF_STORE_PASSWORD", tc.url, w)
		}
		if strings.Contains(w, "S3cretPW") {
			t.Errorf("%s: warnings %q show the password", tc.url, w)
		}
	}
	for _, tc := range []struct{ backend, url string }{
		{"postgres", "host=db user=u passfile=/etc/mf/pgpass sslmode=require"},
		{"postgres", "host=db user=password sslmode=require"},
		{"sqlserver", "server=db;user id=sa;encrypt=strict"},
	} {
		c, err := config.Parse([]byte(fmt.Sprintf("[store]\nbackend = %q\nurl = %q\n%s", tc.backend, tc.url, minimal)), "mf.toml")
		if err != nil {
			t.Fatal(err)
		}
		if w := strings.Join(c.Warnings(), "\n"); strings.Contains(w, "store.url") {
			t.Errorf("%s: a connection string without a password warns %q", tc.url, w)
		}
	}
}

// A token's name is who an operator action is logged as: an empty one, or
// one two tokens share, was accepted (only a shared hash was refused).
func TestTokenNamesAreRequiredAndUnique(t *testing.T) {
	token := func(name, hex string) string {
		return fmt.Sprintf("[[api.tokens]]\nname = %q\nrole = \"viewer\"\nsha256 = %q\n", name, strings.Repeat(hex, 64))
	}
	for _, tc := range []struct{ name, toml, want string }{
		{"no name", "[[api.tokens]]\nrole = \"viewer\"\nsha256 = \"" + strings.Repeat("a", 64) + "\"\n", "api.tokens[0].name: required"},
		{"an empty name", token("", "a"), "api.tokens[0].name: required"},
		{"one name twice", token("grafana", "a") + token("grafana", "b"), `api.tokens[1].name: "grafana" is the name of api.tokens[0] too`},
	} {
		_, err := config.Parse([]byte(minimal+tc.toml), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "site.toml: "+tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, "site.toml: "+tc.want)
		}
	}
	if _, err := config.Parse([]byte(minimal+token("grafana", "a")+token("ops", "b")), "site.toml"); err != nil {
		t.Fatalf("two tokens of their own names: %v", err)
	}
}

// MF_STORE_PASSWORD is trimmed of the white space around it, as
// MF_API_TOKEN is: a password kept in a file often ends in a newline, which
// the database took as part of it. One with a control character inside is
// refused, naming the variable and not the value.
func TestTheStorePasswordIsTrimmed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mf.toml")
	if err := os.WriteFile(path, []byte(minimal), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"S3cretPW", "S3cretPW\n", "S3cretPW\r\n", " \tS3cretPW \n"} {
		t.Setenv(config.PasswordEnv, pw)
		c, err := config.Load(path)
		if err != nil || c.Store.Password != "S3cretPW" {
			t.Errorf("%s=%q: password %q, %v; want %q", config.PasswordEnv, pw, c.Store.Password, err, "S3cretPW")
		}
	}
	for _, pw := range []string{"S3cret\nPW", "S3cret\x01PW", "S3cret\x7fPW"} {
		t.Setenv(config.PasswordEnv, pw)
		_, err := config.Load(path)
		if err == nil || !strings.Contains(err.Error(), config.PasswordEnv+" holds a control character") {
			t.Errorf("%s=%q: error %v; want one naming %s", config.PasswordEnv, pw, err, config.PasswordEnv)
		} else if strings.Contains(err.Error(), "S3cret") {
			t.Errorf("%s=%q: error %q shows the password", config.PasswordEnv, pw, err)
		}
	}
}

// mf token new writes a token's name as TOMLString quotes it: Go's %q
// wrote escapes TOML has not (\a, \v, \x00, \x7f), and mf check refused
// the lines it printed. Any string is read back as written, even one no
// name may be (NameFault): TOML decodes it, the config's rules come after.
func TestTOMLStringIsReadBackAsWritten(t *testing.T) {
	for _, name := range []string{"grafana", "bell\a", "tab\tvt\v", "nul\x00del\x7f", `quote" back\slash`, "line\r\nbreak", "ünïcødé ✓", "c1\u0085"} {
		var got struct{ Name string }
		if err := toml.Unmarshal([]byte("Name = "+config.TOMLString(name)+"\n"), &got); err != nil {
			t.Errorf("name %q written %s: %v", name, config.TOMLString(name), err)
			continue
		}
		if got.Name != name {
			t.Errorf("name %q written %s read back as %q", name, config.TOMLString(name), got.Name)
		}
	}
}

// SQL Server adds a time to its clock with DATEADD, whose count is an INT:
// storage/sqlserver passes whole seconds, and clamps anything beyond
// 2147483647 of them (about 68 years). A time the engine counts but the
// database cannot is refused there at load, naming the key: clamped, a
// leader lease TTL of 100 years was 68 on the database while the fence
// timeout (90 years) still trusted the leader, and a standby could take
// over from a leader still acting. The other dialects take them all.
func TestSQLServerTimesFitItsClock(t *testing.T) {
	urls := map[string]string{"postgres": "postgres://db.internal:5432/mf", "sqlserver": "sqlserver://db.internal:1433?database=mf"}
	file := func(backend, outbound, tail string) []byte {
		out := strings.Replace(minimal, `address = "lab.internal:2576"`, `address = "lab.internal:2576"`+"\n"+outbound, 1)
		return []byte(out + fmt.Sprintf("[store]\nbackend = %q\nurl = %q\n", backend, urls[backend]) + tail)
	}
	for _, tc := range []struct{ name, outbound, tail, want string }{
		{"leader lease beyond an INT of seconds", "",
			"[cluster]\nheartbeat_seconds = 1e9\nleader_fence_timeout_seconds = 2.5e9\nleader_lease_ttl_seconds = 3e9\nnode_timeout_seconds = 3e9\n",
			"cluster.leader_lease_ttl_seconds"},
		{"row lease beyond an INT of seconds", "", "lease_ttl_seconds = 3e9\n", "store.lease_ttl_seconds"},
		{"retention beyond an INT of seconds", "", "retention_days = 30000\n", "store.retention_days"},
		{"retry max beyond an INT of seconds", "retry_max_seconds = 3e9", "", "outbound[0].retry_max_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := config.Parse(file("postgres", tc.outbound, tc.tail), "site.toml"); err != nil {
				t.Fatalf("postgres refused it: %v", err)
			}
			c, err := config.Parse(file("sqlserver", tc.outbound, tc.tail), "site.toml")
			if err == nil {
				t.Fatalf("sqlserver accepted: leader lease ttl %v, fence timeout %v, row lease %v, retention %v, retry max %v",
					c.Cluster.LeaderLeaseTTL(), c.Cluster.LeaderFenceTimeout(), c.Store.LeaseTTL(), c.Store.Retention(), c.Outbound[0].RetryMax())
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "2147483647") {
				t.Fatalf("error %q does not name %s and the bound", err, tc.want)
			}
		})
	}
	// The bound itself is taken.
	if _, err := config.Parse(file("sqlserver", "retry_max_seconds = 2147483647", "lease_ttl_seconds = 2147483647\n"), "site.toml"); err != nil {
		t.Fatalf("sqlserver refused times of 2147483647 s: %v", err)
	}
}

// An MLLP destination that is this node's own MLLP inbound, which routes
// lead back to, loops for ever: each message is received again unchanged,
// routed there again, and stored anew each time. It was accepted (the file
// form of the loop is refused). A destination that is an inbound with no
// route back, or another host, is not a loop.
func TestAnMLLPDestinationLoopingBackToItsInboundIsRefused(t *testing.T) {
	in := func(name, listen string) string {
		// allow_plaintext: a listener on every interface needs TLS or it.
		return fmt.Sprintf("[[inbound]]\nname = %q\ntype = \"mllp\"\nlisten = %q\nallow_plaintext = true\n", name, listen)
	}
	out := func(name, addr string) string {
		return fmt.Sprintf("[[outbound]]\nname = %q\ntype = \"mllp\"\naddress = %q\n", name, addr)
	}
	route := func(from, to string) string { return fmt.Sprintf("[[route]]\nfrom = %q\nto = [%q]\n", from, to) }
	for _, c := range []struct {
		name, cfg string
		refused   []string // keys named
	}{
		{"to itself", in("a", "127.0.0.1:2575") + out("x", "127.0.0.1:2575") + route("a", "x"), []string{"outbound[0].address"}},
		{"by localhost to every interface", in("a", ":2575") + out("x", "localhost:2575") + route("a", "x"), []string{"outbound[0].address"}},
		{"through another inbound", in("a", "127.0.0.1:2575") + in("b", "0.0.0.0:2576") + out("x", "127.0.0.1:2576") + out("z", "[::1]:2575") +
			route("a", "x") + route("b", "z"), []string{"outbound[0].address", "outbound[1].address"}},
		{"to another inbound, no route back", in("a", "127.0.0.1:2575") + in("b", "127.0.0.1:2576") + out("x", "127.0.0.1:2576") + out("y", "lab.internal:2575") +
			route("a", "x") + route("b", "y"), nil},
		{"another host on the same port", in("a", "127.0.0.1:2575") + out("x", "10.0.0.5:2575") + route("a", "x"), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse([]byte(c.cfg), "site.toml")
			if len(c.refused) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want %v refused as a loop", c.refused)
			}
			for _, key := range c.refused {
				if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "for ever") {
					t.Errorf("error %v; want %s named as a loop", err, key)
				}
			}
		})
	}
}

// A file that starts with a UTF-8 byte order mark (what Windows Notepad
// saves as "UTF-8 with BOM") loads as the same file without it, errors
// still on their line: it was refused with "invalid character at start of
// key: U+00EF 'ï'", which shows no character the operator can see.
func TestAFileWithAByteOrderMarkLoads(t *testing.T) {
	c, err := config.Parse([]byte("\ufeff[store]\npath = \"x.db\"\n"+minimal), "site.toml")
	if err != nil || c.Store.Path != "x.db" {
		t.Fatalf("a config that starts with a UTF-8 byte order mark: %v; want it loaded (store.path x.db)", err)
	}
	_, err = config.Parse([]byte("\ufeff[store]\nbakend = \"sqlite\"\n"), "site.toml")
	if err == nil || !strings.Contains(err.Error(), "site.toml:2") || !strings.Contains(err.Error(), `"store.bakend"`) {
		t.Fatalf("an unknown key after a byte order mark: %v; want it named on line 2", err)
	}
}

// log_payloads written after a [table] is, to TOML, a key of that table:
// the error says to move it above the first table. It said to check its
// spelling, which is right, and the operator had nothing to change.
func TestATopLevelKeyInsideATableSaysToMoveIt(t *testing.T) {
	for _, file := range []string{"[store]\npath = \"x.db\"\nlog_payloads = true\n", minimal + "log_payloads = true\n"} {
		_, err := config.Parse([]byte(file), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "log_payloads is a top-level key") || !strings.Contains(err.Error(), "above the first [table]") {
			t.Errorf("log_payloads after a table: %v; want it said to be a top-level key, to move above the first [table]", err)
		}
	}
}

// A file, or a part of one, in UTF-16 (what Windows PowerShell 5's > and
// >> write, as in mf token new >> mf.toml) is refused saying so, on the
// line where it starts: it was "invalid character at start of key: U+00FF
// 'ÿ'", or a NUL, which do not say what is wrong with the file.
func TestAFileInUTF16IsRefusedSayingSo(t *testing.T) {
	utf16 := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			b.WriteByte(byte(r))
			b.WriteByte(0)
		}
		return b.String()
	}
	for _, tc := range []struct{ name, file, line string }{
		{"whole", "\xff\xfe" + utf16("[store]\r\npath = \"x.db\"\r\n"), "site.toml:1"},
		{"appended", minimal + "\xff\xfe" + utf16("[[api.tokens]]\r\nname = \"ops\"\r\n"), fmt.Sprintf("site.toml:%d", strings.Count(minimal, "\n")+1)},
	} {
		_, err := config.Parse([]byte(tc.file), "site.toml")
		if err == nil || !strings.Contains(err.Error(), tc.line+": ") || !strings.Contains(err.Error(), "UTF-16") {
			t.Errorf("%s: %v; want the file said to be UTF-16 from %s", tc.name, err, tc.line)
		}
	}
}

// An inbound that no [[route]] reads from is warned of: every message it
// accepts is answered AA, stored unrouted and delivered nowhere, logged at
// DEBUG only (as for a message a filter leaves out by design), and nothing
// said so at start or in mf check.
func TestAnInboundNoRouteReadsFromIsWarnedOf(t *testing.T) {
	c, err := config.Parse([]byte(minimal+"[[inbound]]\nname = \"orders_in\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:2580\"\n"), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(c.Warnings(), "\n")
	if !strings.Contains(w, "inbound[1] (orders_in): no [[route]] reads from it") || strings.Contains(w, "adt_in") {
		t.Fatalf("warnings %q; want inbound[1] (orders_in) named as read by no route, and adt_in not", w)
	}
}

// A config with no [[inbound]] (an empty or cut-short file reads so) is
// valid, a node left to drain its queue, but it is warned of: mf check said
// ok and mf run answered /ready 200 while accepting nothing. So is an
// outbound no route sends to.
func TestAConfigWithNoInboundIsWarnedOf(t *testing.T) {
	c, err := config.Parse(nil, "empty.toml")
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.Warnings(), "\n"); !strings.Contains(w, "no [[inbound]]: this node accepts no message") {
		t.Fatalf("an empty config's warnings %q; want no [[inbound]] named", w)
	}
	c, err = config.Parse([]byte(minimal+"[[outbound]]\nname = \"spare\"\ntype = \"mllp\"\naddress = \"127.0.0.1:2590\"\n"), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(c.Warnings(), "\n")
	if !strings.Contains(w, "outbound[1] (spare): no [[route]] sends to it") || strings.Contains(w, "no [[inbound]]") || strings.Contains(w, "(lab): no [[route]]") {
		t.Fatalf("warnings %q; want outbound[1] (spare) named as sent to by no route, and nothing of the minimal config's own", w)
	}
}

// An MLLP or HTTP destination with an empty or unspecified host (a
// listener's "every interface") is refused: Go dials it on this machine,
// past the loop check (which looks for loopback names), and the plaintext
// warning said its messages crossed the network.
func TestADestinationWithNoReceiverHostIsRefused(t *testing.T) {
	for _, addr := range []string{":2575", "0.0.0.0:2575", "[::]:2575", "[::%eth0]:2575"} {
		_, err := config.Parse([]byte(minimal+"[[outbound]]\nname = \"o\"\ntype = \"mllp\"\naddress = \""+addr+"\"\n"), "mf.toml")
		if err == nil || !strings.Contains(err.Error(), "outbound[1].address") || !strings.Contains(err.Error(), "names no receiver host") {
			t.Errorf("address %q: %v; want it refused as naming no receiver host", addr, err)
		}
	}
	for _, u := range []string{"http://0.0.0.0:8080/x", "http://[::]/x"} {
		_, err := config.Parse([]byte(minimal+"[[outbound]]\nname = \"o\"\ntype = \"http\"\nurl = \""+u+"\"\n"), "mf.toml")
		if err == nil || !strings.Contains(err.Error(), "names no receiver host") {
			t.Errorf("url %q: %v; want it refused as naming no receiver host", u, err)
		}
	}
	if _, err := config.Parse([]byte(minimal+"[[outbound]]\nname = \"o\"\ntype = \"mllp\"\naddress = \"127.0.0.1:2590\"\n"), "mf.toml"); err != nil {
		t.Fatalf("a loopback destination: %v", err)
	}
}

// A route filter that cannot match is refused (a value with trailing
// blanks: a field's value loses them before the comparison), and one that
// will most likely match nothing is warned of (a separator inside a path
// read as one part, or at the value's end): mf check said ok, and every
// message was answered AA, stored unrouted and delivered nowhere, logged
// at DEBUG only.
func TestARouteFilterThatCannotMatchIsRefusedOrWarnedOf(t *testing.T) {
	filtered := func(filter string) string { return minimal + "filter = { " + filter + " }\n" }
	for _, f := range []string{`"MSH-9.1" = "ADT "`, `"PID-3" = "123^^ISO "`} {
		if _, err := config.Parse([]byte(filtered(f)), "mf.toml"); err == nil || !strings.Contains(err.Error(), "can never match") {
			t.Errorf("filter %s: %v; want refused, can never match", f, err)
		}
	}
	for _, c := range []struct{ filter, says string }{
		{`"MSH-9.1" = "ADT^A01"`, `route[0].filter: "MSH-9.1" = "ADT^A01" reads one component, which holds a "^" only where the sender escaped it`},
		{`"MSH-9.1" = "ADT^A01"`, `did you mean a shorter path, such as "MSH-9"?`},
		{`"PID-3[2].4.1" = "A&B"`, `such as "PID-3[2].4"?`},
		{`"MSH-9" = "ADT^A01^"`, `ends in a separator`},
		{`"PID-3.4" = "NPI&"`, `ends in a separator`},
		{`"PID-3.4" = "NPI^X"`, `reads one component`},
	} {
		cfg, err := config.Parse([]byte(filtered(c.filter)), "mf.toml")
		if err != nil {
			t.Fatalf("filter %s: %v", c.filter, err)
		}
		if w := strings.Join(cfg.Warnings(), "\n"); !strings.Contains(w, c.says) {
			t.Errorf("filter %s: warnings %q; want one saying %q", c.filter, w, c.says)
		}
	}
	for _, f := range []string{`"MSH-9" = "ADT^A01"`, `"MSH-9.1" = "ADT"`, `"PID-3.4" = "NPI&1.2.3&ISO"`, `"MSH-2" = "^~\\& "`, `"MSH-9" = ""`} {
		cfg, err := config.Parse([]byte(filtered(f)), "mf.toml")
		if err != nil {
			t.Fatalf("filter %s: %v", f, err)
		}
		if w := strings.Join(cfg.Warnings(), "\n"); strings.Contains(w, "filter") {
			t.Errorf("filter %s: warnings %q; want none of the filter", f, w)
		}
	}
}

// A TLS private key that every local user may read is warned of, naming the
// key and the file (as a SQLite store others can read is): whoever reads it
// can pose as the API or a listener to the partners, or as mf to a
// destination. A key its group may read (a ssl-cert group) is a choice, and
// is not warned of.
func TestAPrivateKeyEveryUserCanReadIsWarnedOf(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows files have no mode bits for other users")
	}
	p := enginetest.NewPKI(t, t.TempDir())
	q := func(path string) string { return "\"" + path + "\"" }
	site := func(key string) string {
		return "[api]\ntls_cert = " + q(p.ServerCert) + "\ntls_key = " + q(key) + "\n" +
			"[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\ntls_cert = " + q(p.ServerCert) + "\ntls_key = " + q(key) + "\n" +
			"[[outbound]]\nname = \"y\"\ntype = \"mllp\"\naddress = \"h:1\"\ntls = true\ntls_cert = " + q(p.ServerCert) + "\ntls_key = " + q(key) + "\n"
	}
	for _, mode := range []os.FileMode{0o600, 0o640} {
		if err := os.Chmod(p.ServerKey, mode); err != nil {
			t.Fatal(err)
		}
		c, err := config.Parse([]byte(minimal+site(p.ServerKey)), "site.toml")
		if err != nil {
			t.Fatal(err)
		}
		if w := strings.Join(c.Warnings(), "\n"); strings.Contains(w, "tls_key") {
			t.Errorf("a key of mode %v is warned of: %q", mode, w)
		}
	}
	if err := os.Chmod(p.ServerKey, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse([]byte(minimal+site(p.ServerKey)), "site.toml")
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(c.Warnings(), "\n")
	for _, key := range []string{"api.tls_key", "inbound[1].tls_key", "outbound[1].tls_key"} {
		if want := key + ": " + p.ServerKey + " (mode -rw-r--r--) is readable by every local user"; !strings.Contains(w, want) {
			t.Errorf("warnings lack %q: %q", want, w)
		}
	}
}

// A tls_cert out of its dates, or about to be, is warned of at start and by
// mf check, naming the key, the file and the date: an expired certificate
// was loaded without a word, and every peer then refused the handshake.
func TestACertificateOutOfDateIsWarnedOf(t *testing.T) {
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	now := time.Now()
	q := func(path string) string { return "\"" + path + "\"" }
	site := func(cert, key string) string {
		return "[api]\ntls_cert = " + q(cert) + "\ntls_key = " + q(key) + "\n" +
			"[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\ntls_cert = " + q(cert) + "\ntls_key = " + q(key) + "\n" +
			"[[outbound]]\nname = \"y\"\ntype = \"mllp\"\naddress = \"h:1\"\ntls = true\ntls_cert = " + q(cert) + "\ntls_key = " + q(key) + "\n"
	}
	for _, tc := range []struct {
		name      string
		from, to  time.Time
		want      string // "" for no warning
		wantsDate time.Time
	}{
		{"valid for a year", now.Add(-time.Hour), now.Add(365 * 24 * time.Hour), "", time.Time{}},
		{"valid for 31 days", now.Add(-time.Hour), now.Add(31 * 24 * time.Hour), "", time.Time{}},
		{"expired", now.Add(-48 * time.Hour), now.Add(-24 * time.Hour), "expired on ", now.Add(-24 * time.Hour)},
		{"not yet valid", now.Add(24 * time.Hour), now.Add(48 * time.Hour), "is not valid before ", now.Add(24 * time.Hour)},
		{"expiring in 10 days", now.Add(-time.Hour), now.Add(10*24*time.Hour + time.Hour), "expires on ", now.Add(10*24*time.Hour + time.Hour)},
	} {
		cert, key := p.ServerCertValid(t, dir, strings.ReplaceAll(tc.name, " ", "_"), tc.from, tc.to)
		c, err := config.Parse([]byte(minimal+site(cert, key)), "site.toml")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		w := strings.Join(c.Warnings(), "\n")
		if tc.want == "" {
			if strings.Contains(w, "tls_cert") {
				t.Errorf("%s: warned %q", tc.name, w)
			}
			continue
		}
		for _, k := range []string{"api.tls_cert", "inbound[1].tls_cert", "outbound[1].tls_cert"} {
			want := k + ": " + cert + " " + tc.want + tc.wantsDate.UTC().Format("2006-01-02 15:04 UTC")
			if !strings.Contains(w, want) {
				t.Errorf("%s: warnings lack %q: %q", tc.name, want, w)
			}
		}
		// The API, a listener and a destination all take renewed files at
		// their next handshake (internal/tlsfiles): the API's warning said
		// to restart mf run, which on a primary is a failover for nothing.
		for k, when := range map[string]string{"api.tls_cert": "from the next handshake, without a restart", "inbound[1].tls_cert": "from the next handshake, without a restart", "outbound[1].tls_cert": "from the next handshake, without a restart"} {
			said := slices.ContainsFunc(strings.Split(w, "\n"), func(l string) bool {
				return strings.HasPrefix(l, k+": ") && strings.Contains(l, when)
			})
			if !said {
				t.Errorf("%s: the warning of %s does not say %q: %q", tc.name, k, when, w)
			}
		}
	}
}

// A config file that holds the store password and that every local user
// may read is warned of, naming the file and its mode: the password's own
// warning says the file is then a secret, and nothing said that this one
// was readable by all.
func TestAConfigFileWithThePasswordEveryUserCanReadIsWarnedOf(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Windows files have no mode bits for other users")
	}
	path := filepath.Join(t.TempDir(), "mf.toml")
	write := func(url string, mode os.FileMode) *config.Config {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf("[store]\nbackend = \"postgres\"\nurl = %q\n%s", url, minimal)), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	want := path + " (mode -rw-r--r--) holds the store password"
	if w := strings.Join(write("postgres://mf:S3cretPW@db/mf?sslmode=verify-full", 0o644).Warnings(), "\n"); !strings.Contains(w, want) {
		t.Errorf("warnings lack %q: %q", want, w)
	}
	for _, tc := range []struct {
		url  string
		mode os.FileMode
	}{{"postgres://mf:S3cretPW@db/mf?sslmode=verify-full", 0o640}, {"postgres://mf@db/mf?sslmode=verify-full", 0o644}} {
		if w := strings.Join(write(tc.url, tc.mode).Warnings(), "\n"); strings.Contains(w, "holds the store password") {
			t.Errorf("%s, mode %v: warned %q", tc.url, tc.mode, w)
		}
	}
}

// processing_id takes HL7 table 0103's values only: a typo ("PROD", "p")
// would refuse every message of the inbound, so it is refused at load.
func TestProcessingIDIsOneOfTable0103(t *testing.T) {
	in := "[[inbound]]\nname = \"x\"\ntype = \"mllp\"\nlisten = \"127.0.0.1:1\"\n"
	for _, id := range []string{"P", "T", "D"} {
		c, err := config.Parse([]byte(minimal+in+"processing_id = \""+id+"\"\n"), "site.toml")
		if err != nil || c.Inbound[1].ProcessingID != id {
			t.Fatalf("processing_id %q: %v", id, err)
		}
	}
	for _, id := range []string{"PROD", "p", " "} {
		_, err := config.Parse([]byte(minimal+in+"processing_id = \""+id+"\"\n"), "site.toml")
		if err == nil || !strings.Contains(err.Error(), "inbound[1].processing_id: \""+id+"\" is not a processing ID: P (production), T (training) or D (debugging)") {
			t.Fatalf("processing_id %q: %v; want it refused", id, err)
		}
	}
}
