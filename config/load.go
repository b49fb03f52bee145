package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/pelletier/go-toml/v2"

	"github.com/messagefoundry/mf/hl7"
)

// PasswordEnv names the environment variable the store password comes from.
const PasswordEnv = "MF_STORE_PASSWORD"

// Load reads, defaults and validates the file at path. The store password is
// taken from MF_STORE_PASSWORD (StorePassword).
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(b, path)
	if err != nil {
		return nil, err
	}
	if c.Store.Password, err = StorePassword(); err != nil {
		return nil, err
	}
	return c, nil
}

// StorePassword is the store password of MF_STORE_PASSWORD, without the
// white space around it: a password kept in a file often ends in a newline
// (an env file, a secret mount), which the database would take as part of
// it and refuse the login, with an error that does not say why. One that
// holds a control character inside (a line break in the middle) is refused,
// naming the variable and never the value.
func StorePassword() (string, error) {
	pw := strings.TrimSpace(os.Getenv(PasswordEnv))
	if strings.ContainsFunc(pw, unicode.IsControl) {
		return "", fmt.Errorf("config: %s holds a control character (a line break inside the password?): set it to the password alone", PasswordEnv)
	}
	return pw, nil
}

// MaxOutboundNameBytes bounds an outbound's name: SQL Server's destination
// column is NVARCHAR(450), and a lane ("name/key") holds at most
// storage.MaxLaneBytes (800), which a long name would leave little of.
const MaxOutboundNameBytes = 200

// emptySHA256 is the SHA-256 of the empty string.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// NameFault says what is wrong with a name (of an inbound, an outbound, a
// token or the node), or "" when nothing is. A name is a key in the store,
// a metric label and a log field, so it is refused with a control character
// (PostgreSQL refuses a NUL in text: every write naming it would fail) or a
// blank at either end ("lab" and "lab " would be two destinations that no
// log line or metric tells apart, and SQL Server compares them as equal).
func NameFault(name string) string {
	if strings.TrimSpace(name) != name {
		return "begins or ends with a blank"
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Sprintf("contains the control character %U", r)
		}
	}
	return ""
}

// MaxSQLServerSeconds bounds, with backend = "sqlserver", the times the
// store adds to its clock (lease_ttl_seconds, leader_lease_ttl_seconds,
// retention_days, retry_max_seconds): DATEADD takes an INT count, and
// storage/sqlserver passes whole seconds (about 68 years at most).
const MaxSQLServerSeconds = math.MaxInt32

// MaxNodeIDBytes bounds cluster.node_id: it is stored as a node's key and,
// with a suffix, as a lease and row owner, which SQL Server keeps in
// NVARCHAR(450) columns; a longer one failed every heartbeat and election
// there, on that store only.
const MaxNodeIDBytes = 200

// MaxPoolSize bounds store.pool_size: PostgreSQL's pool counts its
// connections in an int32 (2147483648 became the default of 5), and no
// database serves thousands of connections from one client well.
const MaxPoolSize = 1000

// MaxOutboundConnections bounds an mllp or http outbound's connections: the
// MLLP sender makes room for each at start, and 1099511627776 ran mf run out
// of memory.
const MaxOutboundConnections = 1000

// DefaultHTTPConnections is an http outbound's connections when the file
// leaves them out: a few requests in flight at once, not one per lane (a
// feed keyed by patient has thousands of lanes).
const DefaultHTTPConnections = 8

// MaxFileBytes bounds a file inbound's max_file_bytes: a file is read whole
// into memory (the largest int64 overflowed the read's limit: the inbound
// read nothing, and said nothing), and its messages are stored in one
// transaction, which PostgreSQL takes in one protocol message of at most
// 1 GB: a larger file could never be stored there.
const MaxFileBytes = 512 << 20

// MaxMessageBytes bounds an inbound's max_message_bytes: PostgreSQL takes a
// message in one protocol message of at most 1 GB, and a client library
// refuses a larger one before it is sent: the sender was answered AE, and
// sent it again, forever.
const MaxMessageBytes = 512 << 20

// Parse decodes, defaults and validates a config; name is the file named in
// errors.
func Parse(b []byte, name string) (*Config, error) {
	// Windows editors save "UTF-8 with BOM"; go-toml takes the mark for
	// the start of a key ("invalid character U+00EF"). Dropped, the lines
	// and columns of errors are still those an editor shows.
	b = bytes.TrimPrefix(b, []byte("\ufeff"))
	// TOML holds no NUL; UTF-16 text is half NULs. go-toml's words for it
	// name a character ("U+00FF 'ÿ'") and not the encoding.
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return nil, fmt.Errorf("config: %s:%d: NUL bytes from this line on: the file, or this part of it, is UTF-16 (what Windows PowerShell's > and >> write), and a config file is UTF-8: save it as UTF-8 (Out-File -Encoding utf8, or Add-Content)",
			name, bytes.Count(b[:i], []byte("\n"))+1)
	}
	c := &Config{Path: name}
	dec := toml.NewDecoder(bytes.NewReader(b)).DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return nil, decodeError(name, err)
	}
	// The file decoded into c, so it decodes into a map as well.
	var raw map[string]any
	if err := toml.Unmarshal(b, &raw); err != nil {
		return nil, decodeError(name, err)
	}
	written := writtenKeys(raw)
	c.applyDefaults(written)
	var emptyID error
	// The node's id is made at start when the key is left out; written
	// empty, it is an unset variable (node_id = "${HOSTNAME}"), and a new id
	// at every start would leave a node row behind each time.
	if written["cluster.node_id"] && c.Cluster.NodeID == "" {
		emptyID = fmt.Errorf("config: %s: cluster.node_id: is empty: name the node, or leave the key out for a new host:pid:hex id at every start", name)
	}
	if err := errors.Join(emptyID, c.keysOfOtherTypes(written), c.Validate()); err != nil {
		return nil, err
	}
	return c, nil
}

// The keys only some types read, by type: [store] by backend, an inbound
// and an outbound by type. A key not listed is read by every type.
var (
	storeKeys = map[string][]string{
		BackendSQLite:    {"path"},
		BackendPostgres:  {"url"},
		BackendSQLServer: {"url"},
	}
	inboundKeys = map[string][]string{
		InboundMLLP: {"listen", "tls_cert", "tls_key", "client_ca", "client_crl", "tls_client_names", "allow_plaintext", "max_connections", "idle_timeout_seconds", "read_timeout_seconds"},
		InboundFile: {"directory", "archive_directory", "create_directory", "poll_interval_seconds", "settle_seconds", "max_file_bytes"},
	}
	outboundKeys = map[string][]string{
		OutboundMLLP: {"address", "tls", "tls_ca", "tls_cert", "tls_key", "server_name", "connections"},
		OutboundFile: {"directory", "create_directory"},
		OutboundHTTP: {"url", "tls", "tls_ca", "tls_cert", "tls_key", "server_name", "connections"},
	}
)

// keysOfOtherTypes refuses a key the file writes that only other types read
// (address on a file outbound, directory on an mllp one, url with backend =
// "sqlite"): it has no effect, and the operator who wrote it expects one.
// written holds the keys as writtenKeys names them.
func (c *Config) keysOfOtherTypes(written map[string]bool) error {
	var errs []error
	check := func(table, typeKey, typ string, byType map[string][]string) {
		own, known := byType[typ]
		if !known {
			return // Validate refuses the type itself
		}
		readBy := map[string][]string{}
		var keys []string
		for _, other := range slices.Sorted(maps.Keys(byType)) {
			for _, k := range byType[other] {
				if slices.Contains(own, k) {
					continue
				}
				if readBy[k] == nil {
					keys = append(keys, k)
				}
				readBy[k] = append(readBy[k], strconv.Quote(other))
			}
		}
		for _, k := range keys {
			if written[table+"."+k] {
				errs = append(errs, fmt.Errorf("config: %s: %s.%s: has no effect with %s = %q (only %s = %s reads it): remove it, or set the %s it was meant for",
					c.Path, table, k, typeKey, typ, typeKey, strings.Join(readBy[k], " or "), typeKey))
			}
		}
	}
	check("store", "backend", c.Store.Backend, storeKeys)
	for i, in := range c.Inbound {
		check(fmt.Sprintf("inbound[%d]", i), "type", in.Type, inboundKeys)
	}
	for i, o := range c.Outbound {
		check(fmt.Sprintf("outbound[%d]", i), "type", o.Type, outboundKeys)
	}
	return errors.Join(errs...)
}

// topLevelKeys are the keys of the file's top level that are not tables
// (log_payloads).
var topLevelKeys = func() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name != "" && name != "-" && f.Type.Kind() != reflect.Struct && f.Type.Kind() != reflect.Slice {
			keys[name] = true
		}
	}
	return keys
}()

// decodeError names the file, the key and the line of a decode error.
func decodeError(name string, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		var msgs []string
		misplaced := false
		for _, e := range strict.Errors {
			row, _ := e.Position()
			msg := fmt.Sprintf("%s:%d: unknown key %q", name, row, strings.Join(e.Key(), "."))
			// TOML puts a key written after [store] into [store]: a
			// top-level key there is spelt right and in the wrong place.
			if k := e.Key(); len(k) > 1 && topLevelKeys[k[len(k)-1]] {
				msg += fmt.Sprintf(": %s is a top-level key, and TOML reads every key after a [table] line as that table's: move it above the first [table]", k[len(k)-1])
				misplaced = true
			}
			msgs = append(msgs, msg)
		}
		if misplaced && len(msgs) == 1 {
			return fmt.Errorf("config: %s", msgs[0])
		}
		return fmt.Errorf("config: %s (check its spelling against the configuration reference in README.md)", strings.Join(msgs, "; "))
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		key := strings.Join(de.Key(), ".")
		if k := de.Key(); len(k) >= 2 && k[0] == "route" && k[1] == "filter" && strings.Contains(de.Error(), "TOML table") {
			// An unquoted path's dots make TOML nest tables; the decoder's
			// words ("table into ... of type string") do not say so.
			return fmt.Errorf("config: %s:%d:%d: key %q: %s (quote each field path of a filter: \"MSH-9.1\" = \"ADT\", not MSH-9.1 = \"ADT\", which TOML reads as nested keys)",
				name, row, col, key, de.Error())
		}
		if key != "" {
			return fmt.Errorf("config: %s:%d:%d: key %q: %s", name, row, col, key, de.Error())
		}
		return fmt.Errorf("config: %s:%d:%d: %s", name, row, col, de.Error())
	}
	return fmt.Errorf("config: %s: %w", name, err)
}

// applyDefaults fills every field left empty with its default, except a
// number whose key is in written (the keys the file sets): one set to 0
// stays 0, for Validate to refuse where 0 is no value it takes
// (settle_seconds = 0 reads a file at once). Taken for unset,
// it ran with the default while the file said 0, and the timing
// invariant's error quoted the default as the file's value.
func (c *Config) applyDefaults(written map[string]bool) {
	// A string written empty is kept, as a 0 is, for Validate to refuse: it is
	// an unset variable in a templated file more often than a wish for the
	// default.
	s := &c.Store
	defUnwritten(written, "store.backend", &s.Backend, BackendSQLite)
	if s.Backend == BackendSQLite {
		defUnwritten(written, "store.path", &s.Path, "mf.db")
	}
	defUnwritten(written, "store.pool_size", &s.PoolSize, 5)
	defUnwritten(written, "store.lease_ttl_seconds", &s.LeaseTTLSeconds, 60)
	defUnwritten(written, "store.retention_days", &s.RetentionDays, 7)

	cl := &c.Cluster
	defUnwritten(written, "cluster.heartbeat_seconds", &cl.HeartbeatSeconds, 10)
	defUnwritten(written, "cluster.node_timeout_seconds", &cl.NodeTimeoutSeconds, 30)
	defUnwritten(written, "cluster.reclaim_interval_seconds", &cl.ReclaimIntervalSeconds, 30)
	defUnwritten(written, "cluster.leader_lease_ttl_seconds", &cl.LeaderLeaseTTLSeconds, 30)
	defUnwritten(written, "cluster.leader_fence_timeout_seconds", &cl.LeaderFenceTimeoutSeconds, 20)

	defUnwritten(written, "api.listen", &c.API.Listen, "127.0.0.1:8765")

	for i := range c.Inbound {
		in := &c.Inbound[i]
		key := fmt.Sprintf("inbound[%d].", i)
		defUnwritten(written, key+"max_message_bytes", &in.MaxMessageBytes, 1<<20)
		defUnwritten(written, key+"max_connections", &in.MaxConnections, 100)
		defUnwritten(written, key+"idle_timeout_seconds", &in.IdleTimeoutSeconds, 300)
		defUnwritten(written, key+"read_timeout_seconds", &in.ReadTimeoutSeconds, 30)
		defUnwritten(written, key+"poll_interval_seconds", &in.PollIntervalSeconds, 1)
		defUnwritten(written, key+"max_file_bytes", &in.MaxFileBytes, 64<<20)
		defUnwritten(written, key+"settle_seconds", &in.SettleSeconds, DefaultSettleSeconds)
		defUnwritten(written, key+"create_directory", &in.CreateDirectory, true)
		if in.Type == InboundFile && in.Directory != "" && !written[key+"archive_directory"] {
			def(&in.ArchiveDirectory, in.Directory+string(os.PathSeparator)+"archive")
		}
	}
	for i := range c.Outbound {
		o := &c.Outbound[i]
		key := fmt.Sprintf("outbound[%d].", i)
		defUnwritten(written, key+"retry_base_seconds", &o.RetryBaseSeconds, 1)
		defUnwritten(written, key+"retry_max_seconds", &o.RetryMaxSeconds, 300)
		defUnwritten(written, key+"on_exhausted", &o.OnExhausted, ExhaustedBlock)
		defUnwritten(written, key+"timeout_seconds", &o.TimeoutSeconds, 30)
		connections := 1 // many MLLP receivers expect a single connection
		if o.Type == OutboundHTTP {
			connections = DefaultHTTPConnections
		}
		defUnwritten(written, key+"connections", &o.Connections, connections)
		defUnwritten(written, key+"create_directory", &o.CreateDirectory, true)
	}
}

// InForce is the config a node runs after a reload of reloaded: its
// sections, but for those a reload does not apply (RestartOnly's), which
// stay as the node started with them. The whole is validated again, since
// the reloaded file's other sections were checked against its own (an
// outbound's timeout_seconds against its store.lease_ttl_seconds).
func InForce(started, reloaded *Config) (*Config, error) {
	c := *reloaded
	c.Store, c.Cluster, c.API = started.Store, started.Cluster, started.API
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("%w (with the [store], [cluster] and [api] sections this node started with, which a reload does not change)", err)
	}
	return &c, nil
}

// RestartOnly names the sections that differ between the config a node
// started with and a reloaded one, among those a reload does not apply:
// the store and the cluster's settings are the node's connection and
// identity, and the API (listener, TLS, tokens) is served from start.
func RestartOnly(started, reloaded *Config) []string {
	var changed []string
	if !reflect.DeepEqual(started.Store, reloaded.Store) {
		changed = append(changed, "[store]")
	}
	if !reflect.DeepEqual(started.Cluster, reloaded.Cluster) {
		changed = append(changed, "[cluster]")
	}
	if !reflect.DeepEqual(started.API, reloaded.API) {
		changed = append(changed, "[api]")
	}
	return changed
}

// writtenKeys names every key of a decoded file as errors name it:
// "store.pool_size", "inbound[0].max_connections".
func writtenKeys(raw map[string]any) map[string]bool {
	keys := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, sub := range v {
				name := k
				if prefix != "" {
					name = prefix + "." + k
				}
				keys[name] = true
				walk(name, sub)
			}
		case []any:
			for i, sub := range v {
				if _, table := sub.(map[string]any); table {
					walk(fmt.Sprintf("%s[%d]", prefix, i), sub)
				}
			}
		}
	}
	walk("", raw)
	return keys
}

// defUnwritten is def for a key the file may have written: a written value,
// zero included, is kept.
func defUnwritten[T comparable](written map[string]bool, key string, field *T, value T) {
	if !written[key] {
		def(field, value)
	}
}

func def[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

// Validate checks the rules of DESIGN §10. Every error names the file and
// the key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s: %s", c.Path, key, fmt.Sprintf(format, args...)))
	}

	s := c.Store
	switch s.Backend {
	case BackendSQLite:
		switch s.Path {
		case "":
			bad("store.path", "required for backend = \"sqlite\"")
		case ":memory:":
			// sqlite.Open's rule, here so that mf check refuses what mf run would.
			bad("store.path", "%q is SQLite's in-memory database, which keeps nothing across a restart: give a file", s.Path)
		}
	case BackendPostgres, BackendSQLServer:
		if s.URL == "" {
			bad("store.url", "required for backend = %q", s.Backend)
		}
	default:
		bad("store.backend", "%q is not one of sqlite, postgres, sqlserver", s.Backend)
	}
	if s.PoolSize < 1 {
		bad("store.pool_size", "must be at least 1, got %d", s.PoolSize)
	} else if s.PoolSize > MaxPoolSize {
		bad("store.pool_size", "must be at most %d (database connections), got %d", MaxPoolSize, s.PoolSize)
	} else if s.Backend == BackendSQLite && s.PoolSize < 2 {
		// One connection deadlocks the SQLite store: a write transaction
		// holds it while a read (a background checkpoint, a statement
		// outside the transaction) waits for another.
		bad("store.pool_size", "SQLite needs at least 2 connections, got %d", s.PoolSize)
	}
	// A time the engine counts as a time.Duration must fit one: inf, or
	// more than about 292 years, came out negative (a leader lease that had
	// always expired, a retention that purged every finished row at once).
	tooLong := func(key string, v, unitSeconds float64, unit string) bool {
		if v*unitSeconds*float64(time.Second) < float64(math.MaxInt64) {
			return false
		}
		bad(key, "must be a number up to %d %s (the longest time the engine can count), got %v",
			int64(float64(math.MaxInt64)/float64(time.Second)/unitSeconds), unit, v)
		return true
	}
	// The times the store adds to its clock must fit that store too:
	// SQL Server's DATEADD counts whole seconds in an INT, and
	// storage/sqlserver clamps beyond it. Clamped, a leader lease TTL was
	// shorter on the database than the fence timeout the leader trusts
	// itself for, and a row lease shorter than the delivery timeout.
	dbTooLong := func(key string, v, unitSeconds float64, unit string) bool {
		if s.Backend != BackendSQLServer || v*unitSeconds <= MaxSQLServerSeconds {
			return false
		}
		bad(key, "must be at most %d seconds with backend = \"sqlserver\" (%d %s: SQL Server adds it to its clock as an INT of seconds), got %v",
			int64(MaxSQLServerSeconds), int64(MaxSQLServerSeconds/unitSeconds), unit, v)
		return true
	}
	counted := func(key string, v, unitSeconds float64, unit string) bool {
		return !tooLong(key, v, unitSeconds, unit) && !dbTooLong(key, v, unitSeconds, unit)
	}
	// Checked as the durations the engine runs with: a positive number
	// under a nanosecond is 0.
	if counted("store.lease_ttl_seconds", s.LeaseTTLSeconds, 1, "seconds") && s.LeaseTTL() <= 0 {
		bad("store.lease_ttl_seconds", "must be positive, got %v", s.LeaseTTLSeconds)
	}
	if counted("store.retention_days", s.RetentionDays, 86400, "days") && s.Retention() <= 0 {
		bad("store.retention_days", "must be positive, got %v", s.RetentionDays)
	}

	cl := c.Cluster
	if cl.Enabled {
		if s.Backend == BackendSQLite {
			bad("cluster.enabled", "a cluster needs store.backend = \"postgres\" or \"sqlserver\"; SQLite is single-node")
		}
		if s.PoolSize < 2 {
			bad("store.pool_size", "a cluster needs at least 2 connections, got %d", s.PoolSize)
		}
	}
	// The timing invariant holds on the durations the elector runs with
	// (leadership/doc.go), not only on the numbers written.
	timings := !tooLong("cluster.heartbeat_seconds", cl.HeartbeatSeconds, 1, "seconds")
	timings = !tooLong("cluster.leader_fence_timeout_seconds", cl.LeaderFenceTimeoutSeconds, 1, "seconds") && timings
	timings = counted("cluster.leader_lease_ttl_seconds", cl.LeaderLeaseTTLSeconds, 1, "seconds") && timings
	if timings && !(cl.Heartbeat() > 0 && cl.Heartbeat() < cl.LeaderFenceTimeout() && cl.LeaderFenceTimeout() < cl.LeaderLeaseTTL()) {
		bad("cluster", "need 0 < heartbeat_seconds (%v) < leader_fence_timeout_seconds (%v) < leader_lease_ttl_seconds (%v)",
			cl.HeartbeatSeconds, cl.LeaderFenceTimeoutSeconds, cl.LeaderLeaseTTLSeconds)
	}
	if !tooLong("cluster.node_timeout_seconds", cl.NodeTimeoutSeconds, 1, "seconds") && cl.NodeTimeout() <= cl.Heartbeat() {
		bad("cluster.node_timeout_seconds", "must be greater than heartbeat_seconds (%v), got %v", cl.HeartbeatSeconds, cl.NodeTimeoutSeconds)
	}
	if !tooLong("cluster.reclaim_interval_seconds", cl.ReclaimIntervalSeconds, 1, "seconds") && cl.ReclaimInterval() <= 0 {
		bad("cluster.reclaim_interval_seconds", "must be positive, got %v", cl.ReclaimIntervalSeconds)
	}
	if len(cl.NodeID) > MaxNodeIDBytes {
		bad("cluster.node_id", "%d bytes long; at most %d", len(cl.NodeID), MaxNodeIDBytes)
	} else if f := NameFault(cl.NodeID); f != "" {
		bad("cluster.node_id", "%q %s", cl.NodeID, f)
	}

	// Two listeners on one port: the second fails to bind at start.
	var listens []listenAddr
	listen := func(key, addr string) {
		l, ok := parseListen(key, addr)
		if !ok {
			return // checkListen refuses it
		}
		for _, o := range listens {
			if why, clash := l.clashes(o); clash {
				bad(key, "%q and %s (%q) both bind port %d%s: one would fail to bind at start; give each listener a port of its own", addr, o.key, o.addr, l.port, why)
				break
			}
		}
		listens = append(listens, l)
	}

	a := c.API
	if err := checkListen(a.Listen, a.TLSCert, a.TLSKey, a.AllowPlaintext); err != nil {
		bad("api.listen", "%v", err)
	}
	listen("api.listen", a.Listen)
	checkKeyPair("api", a.TLSCert, a.TLSKey, bad)
	// A token matches by its hash alone: two entries with one hash would
	// give it two names and roles, the API taking the last. Its name is
	// who an operator action is logged as: empty or shared, the log could
	// not tell who acted.
	tokenAt := map[string]int{}
	tokenNamed := map[string]int{}
	for i, t := range a.Tokens {
		key := fmt.Sprintf("api.tokens[%d]", i)
		if t.Name == "" {
			bad(key+".name", "required: operator actions are logged with the name of the token that made them")
		} else if f := NameFault(t.Name); f != "" {
			bad(key+".name", "%q %s", t.Name, f)
		} else if j, dup := tokenNamed[t.Name]; dup {
			bad(key+".name", "%q is the name of api.tokens[%d] too: operator actions are logged with the token's name, so give each token a name of its own", t.Name, j)
		} else {
			tokenNamed[t.Name] = i
		}
		if j, dup := tokenAt[strings.ToLower(t.SHA256)]; dup {
			bad(key+".sha256", "is the hash of api.tokens[%d] too (%q): one token would have two names and roles; give each user a token of its own (mf token new)", j, a.Tokens[j].Name)
		} else {
			tokenAt[strings.ToLower(t.SHA256)] = i
		}
		switch t.Role {
		case "viewer", "operator", "admin":
		default:
			bad(key+".role", "%q is not one of viewer, operator, admin", t.Role)
		}
		if len(t.SHA256) != 64 || strings.Trim(strings.ToLower(t.SHA256), "0123456789abcdef") != "" {
			bad(key+".sha256", "must be the 64 hex digits of the token's SHA-256 (mf token new prints it)")
		} else if strings.EqualFold(t.SHA256, emptySHA256) {
			// No token is empty: this is the hash of nothing (a variable
			// unset when the line was made), and no request can use it.
			bad(key+".sha256", "is the SHA-256 of the empty string, not of a token (an unset variable hashed?): make a token with mf token new")
		}
	}

	// The directories file inbounds read, by absolute path: nothing mf
	// writes may land in one, or it is read in again.
	polled := map[string]string{}
	inbound := map[string]bool{}
	for i, in := range c.Inbound {
		key := fmt.Sprintf("inbound[%d]", i)
		if in.Name == "" {
			bad(key+".name", "required")
		} else if f := NameFault(in.Name); f != "" {
			bad(key+".name", "%q %s", in.Name, f)
		} else if inbound[in.Name] {
			bad(key+".name", "%q is used by another inbound", in.Name)
		}
		inbound[in.Name] = true
		switch in.Type {
		case InboundMLLP:
			if err := checkListen(in.Listen, in.TLSCert, in.TLSKey, in.AllowPlaintext); err != nil {
				bad(key+".listen", "%v", err)
			}
			listen(key+".listen", in.Listen)
			if in.ClientCA != "" && in.TLSCert == "" {
				bad(key+".client_ca", "mutual TLS needs tls_cert and tls_key too")
			}
			checkKeyPair(key, in.TLSCert, in.TLSKey, bad)
			checkCAFile(key+".client_ca", in.ClientCA, bad)
			checkCRLFiles(key+".client_crl", in, bad)
			checkClientNames(key+".tls_client_names", in, bad)
		case InboundFile:
			if in.Directory == "" {
				bad(key+".directory", "required for type = \"file\"")
			} else if other, dup := polled[absDir(in.Directory)]; dup {
				bad(key+".directory", "%q is %s too: both inbounds would read each file, storing its messages twice, and one's archiving of it would fail; give each inbound a directory of its own", in.Directory, other)
			} else {
				polled[absDir(in.Directory)] = key + ".directory"
			}
		default:
			bad(key+".type", "%q is not one of mllp, file", in.Type)
		}
		switch in.ProcessingID {
		case "", "P", "T", "D":
		default:
			bad(key+".processing_id", "%q is not a processing ID: P (production), T (training) or D (debugging), HL7 table 0103; leave it out to take any", in.ProcessingID)
		}
		if in.MaxMessageBytes < 64 {
			bad(key+".max_message_bytes", "must be at least 64, got %d", in.MaxMessageBytes)
		} else if in.MaxMessageBytes > MaxMessageBytes {
			bad(key+".max_message_bytes", "must be at most %d (512 MiB: the largest message every store can take), got %d", MaxMessageBytes, in.MaxMessageBytes)
		}
		if in.MaxConnections < 1 {
			bad(key+".max_connections", "must be at least 1, got %d", in.MaxConnections)
		}
		fits := !tooLong(key+".idle_timeout_seconds", in.IdleTimeoutSeconds, 1, "seconds")
		fits = !tooLong(key+".read_timeout_seconds", in.ReadTimeoutSeconds, 1, "seconds") && fits
		fits = !tooLong(key+".poll_interval_seconds", in.PollIntervalSeconds, 1, "seconds") && fits
		if fits && (in.IdleTimeout() <= 0 || in.ReadTimeout() <= 0 || in.PollInterval() <= 0) {
			bad(key, "idle_timeout_seconds, read_timeout_seconds and poll_interval_seconds must be positive")
		}
		if settle := in.SettleSeconds; !(settle >= 0 && !math.IsInf(settle, 1)) {
			bad(key+".settle_seconds", "must be 0 (read a file at once) or a number of seconds, got %v", settle)
		} else {
			tooLong(key+".settle_seconds", settle, 1, "seconds")
		}
		if in.MaxFileBytes < 1 {
			bad(key+".max_file_bytes", "must be at least 1, got %d", in.MaxFileBytes)
		} else if in.MaxFileBytes > MaxFileBytes {
			bad(key+".max_file_bytes", "must be at most %d (512 MiB: a file is read whole into memory, and stored in one transaction), got %d", MaxFileBytes, in.MaxFileBytes)
		}
	}
	// An archived file moved into a directory a file inbound reads is read
	// again at its next poll: its messages stored again, every poll.
	for i, in := range c.Inbound {
		if in.Type != InboundFile || in.Directory == "" {
			continue
		}
		key := fmt.Sprintf("inbound[%d]", i)
		if in.ArchiveDirectory == "" {
			bad(key+".archive_directory", "is empty: name a directory, or leave the key out for the default %s", filepath.Join(in.Directory, "archive"))
			continue
		}
		if absDir(in.ArchiveDirectory) == absDir(in.Directory) {
			bad(key+".archive_directory", "%q is this inbound's directory too: each file archived would be read again at the next poll, its messages stored again and again; give it a directory of its own (default %s)",
				in.ArchiveDirectory, filepath.Join(in.Directory, "archive"))
		} else if other, fed := polled[absDir(in.ArchiveDirectory)]; fed {
			bad(key+".archive_directory", "%q is %s: each file archived would be read again by that inbound, its messages stored twice; give it a directory of its own", in.ArchiveDirectory, other)
		}
	}

	// A file inbound takes every file of its directory for messages and
	// moves it to its archive: the SQLite store's files (the database, its
	// -wal and -shm) were moved away under the running engine, which
	// started on an empty store next time, and this config file would go
	// the same way.
	if c.Store.Backend == BackendSQLite && c.Store.Path != "" {
		if in, fed := polled[absDir(filepath.Dir(c.Store.Path))]; fed {
			bad("store.path", "%q lies in the directory of %s, which takes every file there for messages and moves it to its archive: the store's files (the database, its -wal and -shm) would be moved away under the running engine; keep the store in a directory of its own", c.Store.Path, in)
		}
	}
	if c.Path != "" {
		if in, fed := polled[absDir(filepath.Dir(c.Path))]; fed {
			bad("inbound", "this config file (%s) lies in the directory of %s, which takes every file there for messages and moves it to its archive; keep the config elsewhere", c.Path, in)
		}
	}

	written := map[string]string{} // file outbounds' directories, by absolute path
	outbound := map[string]bool{}
	for i, o := range c.Outbound {
		key := fmt.Sprintf("outbound[%d]", i)
		if o.Name == "" {
			bad(key+".name", "required")
		} else if f := NameFault(o.Name); f != "" {
			bad(key+".name", "%q %s", o.Name, f)
		} else if outbound[o.Name] {
			bad(key+".name", "%q is used by another outbound", o.Name)
		} else if strings.Contains(o.Name, "/") {
			bad(key+".name", "%q must not contain '/' (lanes are named destination/key)", o.Name)
		} else if len(o.Name) > MaxOutboundNameBytes {
			bad(key+".name", "%d bytes long; at most %d (every store indexes destination names, and a lane must leave room for its key)", len(o.Name), MaxOutboundNameBytes)
		}
		outbound[o.Name] = true
		switch o.Type {
		case OutboundMLLP:
			if err := CheckHostPort(o.Address, false); err != nil {
				bad(key+".address", "%v", err)
			} else if host, _, _ := net.SplitHostPort(o.Address); everyInterface(host) {
				bad(key+".address", "%s", noReceiverHost(o.Address))
			}
			if (o.TLSCert == "") != (o.TLSKey == "") {
				bad(key+".tls_cert", "tls_cert and tls_key go together")
			}
			if !o.TLS && (o.TLSCA != "" || o.TLSCert != "" || o.ServerName != "") {
				bad(key+".tls", "tls_ca, tls_cert, tls_key and server_name need tls = true (otherwise the message would go in plaintext)")
			}
		case OutboundFile:
			dir := absDir(o.Directory)
			if o.Directory == "" {
				bad(key+".directory", "required for type = \"file\"")
			} else if in, fed := polled[dir]; fed {
				bad(key+".directory", "%q is %s: every message written there would be read in again by that inbound (a loop, if a route leads it back here); give the destination a directory of its own", o.Directory, in)
			} else if other, dup := written[dir]; dup {
				bad(key+".directory", "%q is %s too: each destination removes the temporary files it finds there at its first send, and could remove one the other is writing; give each destination a directory of its own", o.Directory, other)
			} else {
				written[dir] = key + ".directory"
			}
		case OutboundHTTP:
			checkHTTPOutbound(o, func(field, format string, args ...any) { bad(key+"."+field, format, args...) })
		default:
			bad(key+".type", "%q is not one of mllp, file, http", o.Type)
		}
		if o.Type == OutboundMLLP || o.Type == OutboundHTTP {
			checkKeyPair(key, o.TLSCert, o.TLSKey, bad)
			checkCAFile(key+".tls_ca", o.TLSCA, bad)
			if o.Connections < 1 {
				bad(key+".connections", "must be at least 1, got %d", o.Connections)
			} else if o.Connections > MaxOutboundConnections {
				bad(key+".connections", "must be at most %d, got %d", MaxOutboundConnections, o.Connections)
			}
		}
		if o.MaxAttempts < 0 {
			bad(key+".max_attempts", "must be 0 (never give up) or more, got %d", o.MaxAttempts)
		}
		if o.OnExhausted != ExhaustedBlock && o.OnExhausted != ExhaustedDead {
			bad(key+".on_exhausted", "%q is not one of block, dead", o.OnExhausted)
		}
		retries := !tooLong(key+".retry_base_seconds", o.RetryBaseSeconds, 1, "seconds")
		retries = counted(key+".retry_max_seconds", o.RetryMaxSeconds, 1, "seconds") && retries
		if retries && (o.RetryBase() <= 0 || o.RetryMax() < o.RetryBase()) {
			bad(key, "need 0 < retry_base_seconds (%v) <= retry_max_seconds (%v)", o.RetryBaseSeconds, o.RetryMaxSeconds)
		}
		if o.Timeout() <= 0 || o.TimeoutSeconds >= s.LeaseTTLSeconds {
			bad(key+".timeout_seconds", "must be positive and below store.lease_ttl_seconds (%v), got %v", s.LeaseTTLSeconds, o.TimeoutSeconds)
		}
	}

	for i, r := range c.Route {
		key := fmt.Sprintf("route[%d]", i)
		if !inbound[r.From] {
			bad(key+".from", "%q is not the name of an [[inbound]]", r.From)
		}
		if len(r.To) == 0 {
			bad(key+".to", "names no [[outbound]]")
		}
		for _, to := range r.To {
			if !outbound[to] {
				bad(key+".to", "%q is not the name of an [[outbound]]", to)
			}
		}
		for _, path := range slices.Sorted(maps.Keys(r.Filter)) {
			p, err := hl7.ParsePath(path)
			if err != nil {
				bad(key+".filter", "%v", err)
				continue
			}
			if v := r.Filter[path]; strings.TrimRight(v, " ") != v && !delimiters(p) {
				bad(key+".filter", "%q = %q can never match: a field's value loses its trailing blanks before it is compared (HL7 lets senders pad with them); write it without them", path, v)
			}
		}
		if r.LaneKey != "" {
			if _, err := hl7.ParsePath(r.LaneKey); err != nil {
				bad(key+".lane_key", "%v", err)
			}
		}
	}
	loops := mllpLoops(c)
	for _, key := range slices.Sorted(maps.Keys(loops)) {
		bad(key, "%s", loops[key])
	}
	return errors.Join(errs...)
}

// checkHTTPOutbound refuses what the HTTP sender cannot be built from, so
// that `mf check` refuses it too: a destination whose sender cannot be built
// never delivers, and its messages pile up with nothing but one log line at
// start to say why. Errors show the URL cleaned (CleanURL): a config error
// is printed and logged.
func checkHTTPOutbound(o Outbound, bad func(field, format string, args ...any)) {
	u, err := url.Parse(o.URL)
	switch {
	case o.URL == "":
		bad("url", "required for type = \"http\"")
		return
	case err != nil:
		// url.Parse quotes the whole URL in its error, password included.
		bad("url", "not a valid URL; want http://host[:port]/path or https://host[:port]/path")
		return
	case u.Scheme != "http" && u.Scheme != "https":
		bad("url", "want an http:// or https:// URL, got %q", CleanURL(o.URL))
		return
	case u.Host == "":
		bad("url", "%q names no host; want http://host[:port]/path or https://host[:port]/path", CleanURL(o.URL))
	case u.Port() != "" || strings.HasSuffix(u.Host, ":"):
		// As an mllp address's: accepted, a port out of range failed at
		// every send, each counted no attempt, so for ever.
		if err := CheckHostPort(u.Host, false); err != nil {
			bad("url", "%q: %v", CleanURL(o.URL), err)
		}
	}
	if u.Host != "" && everyInterface(u.Hostname()) {
		bad("url", "%q: %s", CleanURL(o.URL), noReceiverHost(u.Host))
	}
	if u.Scheme != "https" && (o.TLS || o.TLSCA != "" || o.TLSCert != "" || o.TLSKey != "" || o.ServerName != "") {
		bad("url", "tls, tls_ca, tls_cert, tls_key and server_name need an https:// URL (otherwise the message would go in plaintext): use https:// or remove them")
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		bad("tls_cert", "tls_cert and tls_key go together (the client certificate and its key)")
	}
}

// checkKeyPair loads the certificate and key of the table at prefix (its
// tls_cert and tls_key) as mf run does at start, so that mf check, and a
// reload, refuse a file that is missing or unreadable, or a certificate
// that is not the key's, naming the key and the path: accepted, they failed
// only at start (a listener or the API not served, a destination's lanes
// not delivering). Nothing is checked unless both are set; that rule is
// checked apart.
func checkKeyPair(prefix, cert, key string, bad func(key, format string, args ...any)) {
	if cert == "" || key == "" {
		return
	}
	certPEM, certErr := readTLSFile(cert)
	if certErr != nil {
		bad(prefix+".tls_cert", "%v", certErr)
	}
	keyPEM, keyErr := readTLSFile(key)
	if keyErr != nil {
		bad(prefix+".tls_key", "%v", keyErr)
	}
	if certErr != nil || keyErr != nil {
		return
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		bad(prefix+".tls_cert", "%s with tls_key %s: not a PEM certificate and its private key: %v", cert, key, err)
	}
}

// checkCAFile reads the PEM CA file at path, as mf run does at start.
func checkCAFile(key, path string, bad func(key, format string, args ...any)) {
	if path == "" {
		return
	}
	b, err := readTLSFile(path)
	if err != nil {
		bad(key, "%v", err)
		return
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		bad(key, "%s holds no PEM certificate", path)
	}
}

// checkClientNames refuses tls_client_names (at key) on an inbound that
// verifies no client certificate, where there is no name to check, and a
// name that is empty or holds a blank, which no certificate carries.
func checkClientNames(key string, in Inbound, bad func(key, format string, args ...any)) {
	if len(in.TLSClientNames) == 0 {
		return
	}
	if in.ClientCA == "" {
		bad(key, "needs client_ca: without it the listener asks for no client certificate, so there is no name to check; set client_ca to the PEM file of the CA that signs the partners' certificates")
	}
	for i, name := range in.TLSClientNames {
		if name == "" || strings.IndexFunc(name, unicode.IsSpace) >= 0 {
			bad(fmt.Sprintf("%s[%d]", key, i), "%q is not a certificate name: want a DNS name or a CN, without blanks", name)
		}
	}
}

// readTLSFile reads a TLS file; its error names the path (os's does).
func readTLSFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("%w: the file must be readable by the user mf runs as, and mf check run as that user", err)
	}
	return b, err
}

// TOMLString quotes s as a TOML basic string, for a config line mf prints
// for the operator to paste (mf token new): Go's %q writes escapes TOML does
// not have (\a, \v, \x07), and the file was then refused. A control
// character is written \uXXXX; invalid UTF-8, which no TOML file holds,
// becomes U+FFFD.
func TOMLString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if unicode.IsControl(r) {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// CleanURL is raw as an error or a log line may show it: scheme, host and
// path, without the user, password, query and fragment, since a URL may
// carry credentials (https://user:pass@…, ?api_key=…) and a delivery's
// error reaches the logs and the queue row, which GET /lanes shows to any
// monitoring token.
func CleanURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not a valid URL)"
	}
	clean := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return clean.String()
}

// connStringPassword finds a password key in a connection string: a key
// at its start or after a separator (white space, ';', or the "odbc:" of
// go-mssqldb's ODBC form), in any case, before an '=' (with or without
// spaces around it).
var connStringPassword = regexp.MustCompile(`(?i)(?:^|[\s;:])\s*(?:password|pwd)\s*=`)

// storeURLHasPassword reports whether a store url carries a password, as
// user:password@ or a password query parameter of a URL (both drivers read
// either), or as a password (or pwd) setting of a connection string of
// keys and values, PostgreSQL's "host=db password=…" and SQL Server's
// "server=db;password=…".
func storeURLHasPassword(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql" && u.Scheme != "sqlserver") {
		return connStringPassword.MatchString(raw)
	}
	if _, ok := u.User.Password(); ok {
		return true
	}
	return u.Query().Has("password")
}

// CheckHostPort checks addr, a host:port address a listener binds (listen)
// or a destination is dialled at: its port must be a decimal number from 1
// to 65535. net.SplitHostPort alone takes "h:", "h:0", "h:99999", "h:-5" and
// "h:abc", which failed only at start or at the first send, or not at all:
// a listen on port 0 binds a port of the kernel's choosing. The error names
// addr and what is wanted.
func CheckHostPort(addr string, listen bool) error {
	_, _, err := splitHostPort(addr, listen)
	return err
}

func splitHostPort(addr string, listen bool) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err) // net's own error repeats addr
		}
		return "", 0, fmt.Errorf("want host:port, got %q: %v", addr, err)
	}
	want := "want host:port with a port from 1 to 65535"
	n, err := strconv.Atoi(port)
	switch {
	case port == "":
		return "", 0, fmt.Errorf("%s, got %q: no port after the colon", want, addr)
	case strings.Trim(port, "0123456789") != "":
		return "", 0, fmt.Errorf("%s, got %q: the port %q is not a decimal number", want, addr, port)
	case err != nil || n > 65535:
		return "", 0, fmt.Errorf("%s, got %q: %s is above 65535", want, addr, port)
	case n == 0 && listen:
		return "", 0, fmt.Errorf("%s, got %q: port 0 binds a port of the kernel's choosing, another at every start, which no sender could be told; give the port senders connect to", want, addr)
	case n == 0:
		return "", 0, fmt.Errorf("%s, got %q: no receiver listens on port 0", want, addr)
	}
	return host, n, nil
}

// listenAddr is a listener's address, as Validate compares them.
type listenAddr struct {
	key, addr, host string
	port            int
}

// parseListen reads a listen address of key; ok is false for one that
// checkListen refuses.
func parseListen(key, addr string) (l listenAddr, ok bool) {
	host, port, err := splitHostPort(addr, true)
	if err != nil {
		return listenAddr{}, false
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1" // what net.Listen binds for it, in any case
	}
	return listenAddr{key: key, addr: addr, host: host, port: port}, true
}

// clashes reports whether l and o cannot both bind: one port, and the same
// host or either one every interface ("", 0.0.0.0, ::). why is what to say
// of a wildcard.
func (l listenAddr) clashes(o listenAddr) (why string, clash bool) {
	if l.port != o.port {
		return "", false
	}
	for _, a := range []listenAddr{l, o} {
		if everyInterface(a.host) {
			return fmt.Sprintf(" (%q binds it on every interface)", a.addr), true
		}
	}
	return "", sameHost(l.host, o.host)
}

// everyInterface reports whether a listen host binds every interface: "",
// 0.0.0.0 or ::.
func everyInterface(host string) bool {
	host, _, _ = strings.Cut(host, "%") // a zone: "::%eth0" is every interface of eth0
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// noReceiverHost is the error of a destination's address whose host is
// empty or unspecified (0.0.0.0, ::), which is a listener's way of saying
// "every interface": Go dials it to this machine, so the destination would
// be mf's own host, past the loop check and the plaintext warning, which
// look for loopback names.
func noReceiverHost(addr string) string {
	return fmt.Sprintf("%q names no receiver host (an empty host, 0.0.0.0 or :: is dialled on this machine): give the receiver's host name or address (127.0.0.1 if it runs here)", addr)
}

// checkListen applies the fail-closed rule: a listener on a non-loopback
// address needs TLS unless plaintext is explicitly allowed.
func checkListen(addr, cert, key string, allowPlaintext bool) error {
	if err := CheckHostPort(addr, true); err != nil {
		return err
	}
	if (cert == "") != (key == "") {
		return fmt.Errorf("tls_cert and tls_key go together")
	}
	if allowPlaintext || !exposedPlaintext(addr, cert) {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address and has no TLS: set tls_cert and tls_key, or allow_plaintext = true to accept plaintext on the network", addr)
}

// exposedPlaintext reports whether a listener on addr with no certificate
// would accept plaintext beyond loopback.
func exposedPlaintext(addr, cert string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && cert == "" && !IsLoopback(host)
}

// IsLoopback reports whether host (of a listen address) binds loopback only.
// An empty host binds every interface, so it is not loopback.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") { // a host name is not case sensitive
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// absDir is a directory of the config as the engine finds it: relative to
// the working directory, cleaned, so that "in", "./in/" and its absolute
// path are one directory.
func absDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// keyEveryUserReads says, of the TLS private key at path, that every local
// user may read it, or "" (no path, a key only its owner or group may read,
// a file that cannot be looked at, which validation reports, or Windows,
// whose files have no such mode bits). Whoever reads the key can pose as
// the API or a listener to its clients, or as mf to a destination.
func keyEveryUserReads(path string) string {
	mode, ok := everyUserReads(path)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s (mode %s) is readable by every local user, and it is a private key: chmod o-rwx it (mf needs only its own user, or its group, to read it)", path, mode)
}

// everyUserReads reports whether the regular file at path may be read by
// every local user, and its mode; false for no path, a file that cannot be
// looked at, or Windows, whose files have no such mode bits.
func everyUserReads(path string) (os.FileMode, bool) {
	if path == "" || runtime.GOOS == "windows" {
		return 0, false
	}
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 == 0 {
		return 0, false
	}
	return fi.Mode().Perm(), true
}

// Warnings lists the settings of a valid config that weaken its safety on
// purpose (plaintext on the network, payloads in logs), each naming its key:
// mf run logs them at WARN so that they never go unnoticed.
func (c *Config) Warnings() []string {
	var w []string
	plain := func(key, addr, cert string, allow bool) {
		if allow && exposedPlaintext(addr, cert) {
			w = append(w, fmt.Sprintf("%s: %s accepts plaintext on the network (allow_plaintext = true); use TLS outside a trusted segment", key, addr))
		}
	}
	plain("api.listen", c.API.Listen, c.API.TLSCert, c.API.AllowPlaintext)
	for i, in := range c.Inbound {
		if in.Type == InboundMLLP {
			plain(fmt.Sprintf("inbound[%d].listen", i), in.Listen, in.TLSCert, in.AllowPlaintext)
		}
	}
	// Outbounds send without TLS unless told (receivers of plain MLLP are
	// the common case), so this is a warning, not a refusal as for a
	// listener; but a hospital's security review must find every feed of
	// PHI that crosses the network unencrypted.
	for i, o := range c.Outbound {
		switch o.Type {
		case OutboundMLLP:
			if host, _, err := net.SplitHostPort(o.Address); err == nil && !o.TLS && !IsLoopback(host) {
				w = append(w, fmt.Sprintf("outbound[%d] (%s): sends to %s in plaintext (tls = false): its messages (patient data) cross the network unencrypted; set tls = true where the receiver takes TLS", i, o.Name, o.Address))
			}
		case OutboundHTTP:
			if u, err := url.Parse(o.URL); err == nil && u.Scheme == "http" && !IsLoopback(u.Hostname()) {
				w = append(w, fmt.Sprintf("outbound[%d] (%s): posts to %s in plaintext (http://): its messages (patient data) cross the network unencrypted; use https://", i, o.Name, u.Host))
			}
		}
	}
	// A message no route takes is answered AA and stored unrouted, logged
	// at DEBUG only (a filter may leave a message type out by design); an
	// inbound no route reads from does that to every message it accepts.
	routed := map[string]bool{}
	for _, r := range c.Route {
		routed[r.From] = true
	}
	if len(c.Inbound) == 0 {
		// Valid (a node left to drain what is queued), but an empty or
		// truncated file is that too, and it runs "ready" accepting nothing.
		w = append(w, "no [[inbound]]: this node accepts no message, it only delivers what is already queued; add an [[inbound]] (an empty or cut-short config file reads so)")
	}
	sent := map[string]bool{}
	for _, r := range c.Route {
		for _, to := range r.To {
			sent[to] = true
		}
	}
	for i, o := range c.Outbound {
		if !sent[o.Name] {
			w = append(w, fmt.Sprintf("outbound[%d] (%s): no [[route]] sends to it: it delivers only what is already queued for it; add a route to it, or take it out", i, o.Name))
		}
	}
	for i, in := range c.Inbound {
		if !routed[in.Name] {
			w = append(w, fmt.Sprintf("inbound[%d] (%s): no [[route]] reads from it: every message it accepts is acknowledged AA, stored as unrouted and delivered nowhere; add a route from it, or take it out", i, in.Name))
		}
	}
	for i, r := range c.Route {
		for _, path := range slices.Sorted(maps.Keys(r.Filter)) {
			if msg := filterWarning(path, r.Filter[path]); msg != "" {
				w = append(w, fmt.Sprintf("route[%d].filter: %s", i, msg))
			}
		}
	}
	openKey := func(key, path string) {
		if msg := keyEveryUserReads(path); msg != "" {
			w = append(w, key+": "+msg)
		}
	}
	now := time.Now()
	cert := func(key, path, renewed string) {
		if msg := certWarning(path, renewed, now); msg != "" {
			w = append(w, key+": "+msg)
		}
	}
	openKey("api.tls_key", c.API.TLSKey)
	cert("api.tls_cert", c.API.TLSCert, renewedAtHandshake)
	for i, in := range c.Inbound {
		openKey(fmt.Sprintf("inbound[%d].tls_key", i), in.TLSKey)
		cert(fmt.Sprintf("inbound[%d].tls_cert", i), in.TLSCert, renewedAtHandshake)
		w = append(w, crlWarnings(fmt.Sprintf("inbound[%d].client_crl", i), in, now)...)
	}
	for i, o := range c.Outbound {
		openKey(fmt.Sprintf("outbound[%d].tls_key", i), o.TLSKey)
		cert(fmt.Sprintf("outbound[%d].tls_cert", i), o.TLSCert, renewedAtHandshake)
	}
	if storeURLHasPassword(c.Store.URL) {
		w = append(w, "store.url carries a password, which makes the config file a secret: remove it from the url and set "+PasswordEnv+" (it takes precedence over the url's)")
		if mode, ok := everyUserReads(c.Path); ok {
			w = append(w, fmt.Sprintf("%s (mode %s) holds the store password (store.url) and every local user may read it: chmod o-rwx it, or move the password to %s", c.Path, mode, PasswordEnv))
		}
	}
	if c.LogPayloads {
		w = append(w, "log_payloads = true: log lines about rejected messages carry their contents (patient data); turn it off outside debugging")
	}
	return w
}

// delimiters reports whether p is MSH-1 or MSH-2, whose values are the
// message's delimiters, compared as written.
func delimiters(p hl7.Path) bool { return p.Segment == "MSH" && p.Field <= 2 }

// filterWarning says why a route's filter value will most likely match
// nothing, or "": it holds a delimiter where the field is read as one part
// (a component holds ^, a subcomponent ^ or &, only when the sender escaped
// it: "MSH-9.1" = "ADT^A01" meant "MSH-9"), or ends in one (empty trailing
// components and subcomponents are dropped before the comparison). Each
// can match an escaped delimiter, so it is a warning, not a refusal.
func filterWarning(path, value string) string {
	p, err := hl7.ParsePath(path)
	if err != nil || delimiters(p) {
		return ""
	}
	var inside string
	switch {
	case p.Subcomponent > 0:
		inside = "^&"
	case p.Component > 0:
		inside = "^"
	}
	if i := strings.IndexAny(value, inside); inside != "" && i >= 0 {
		part := "component"
		if p.Subcomponent > 0 {
			part = "subcomponent"
		}
		return fmt.Sprintf("%q = %q reads one %s, which holds a %q only where the sender escaped it: messages will most likely match no route and be stored unrouted (did you mean a shorter path, such as %q?)",
			path, value, part, value[i:i+1], shorter(p))
	}
	if strings.HasSuffix(value, "^") || strings.HasSuffix(value, "&") {
		return fmt.Sprintf("%q = %q ends in a separator, but empty trailing components and subcomponents are dropped before the comparison (|ADT^A01^| reads as ADT^A01): messages will most likely match no route and be stored unrouted; leave the separator out", path, value)
	}
	return ""
}

// shorter is p without its last part: the component of a subcomponent,
// the field of a component.
func shorter(p hl7.Path) string {
	if p.Subcomponent > 0 {
		p.Subcomponent = 0
	} else {
		p.Component = 0
	}
	return p.String()
}
