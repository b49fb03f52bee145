// Package config is mf's TOML configuration file (DESIGN §10): its types,
// their defaults and the rules checked at load. Loading is strict: an unknown
// key is an error that names the key and the file, so that a misspelt
// setting never silently falls back to a default, and so is a key that only
// another type reads (an outbound's, an inbound's, the store backend's), so
// that one never silently has no effect.
//
// Flags and environment variables only choose the file and fill the few
// fields they name (the store password); nothing else reads them.
package config

import "time"

// Config is the whole file.
type Config struct {
	Store    Store      `toml:"store"`
	Cluster  Cluster    `toml:"cluster"`
	API      API        `toml:"api"`
	Inbound  []Inbound  `toml:"inbound"`
	Outbound []Outbound `toml:"outbound"`
	Route    []Route    `toml:"route"`

	// LogPayloads lets log lines about a rejected message carry its bytes,
	// and lines about a destination's refusal carry the destination's own
	// words (which may echo patient data). Off by default: logs are shipped
	// to places that are not cleared for PHI. A top-level key.
	LogPayloads bool `toml:"log_payloads"`

	// Path is the file the config was read from ("" for a built-in config);
	// errors name it.
	Path string `toml:"-"`
}

// Store backends.
const (
	BackendSQLite    = "sqlite"
	BackendPostgres  = "postgres"
	BackendSQLServer = "sqlserver"
)

// Store is the [store] table: where messages and queue rows live.
type Store struct {
	// Backend is "sqlite" (default; single node), "postgres" or "sqlserver".
	Backend string `toml:"backend"`
	// Path is the SQLite file (default "mf.db"), relative to the working
	// directory.
	Path string `toml:"path"`
	// URL is the PostgreSQL or SQL Server connection URL. Its password, if
	// any, is better given in MF_STORE_PASSWORD.
	URL string `toml:"url"`
	// Password is never read from the file: it comes from MF_STORE_PASSWORD.
	Password string `toml:"-"`
	// PoolSize is the number of database connections (default 5; at most
	// MaxPoolSize).
	PoolSize int `toml:"pool_size"`
	// LeaseTTLSeconds is the per-row delivery lease (default 60). A delivery
	// that is not finished within it may be reclaimed and sent again, so
	// every outbound timeout must be shorter.
	LeaseTTLSeconds float64 `toml:"lease_ttl_seconds"`
	// RetentionDays: finished rows older than this are purged by the leader
	// (default 7).
	RetentionDays float64 `toml:"retention_days"`
}

// Cluster is the [cluster] table: active-passive high availability.
type Cluster struct {
	// Enabled turns on clustering; it needs a server database and
	// pool_size >= 2.
	Enabled bool `toml:"enabled"`
	// NodeID names this node (default host:pid:random-hex).
	NodeID string `toml:"node_id"`
	// HeartbeatSeconds is the lease renewal and membership interval
	// (default 10).
	HeartbeatSeconds float64 `toml:"heartbeat_seconds"`
	// NodeTimeoutSeconds: a node not seen for this long is dead (default 30).
	NodeTimeoutSeconds float64 `toml:"node_timeout_seconds"`
	// ReclaimIntervalSeconds is the period of the leader's expired-lease
	// sweep (default 30).
	ReclaimIntervalSeconds float64 `toml:"reclaim_interval_seconds"`
	// LeaderLeaseTTLSeconds: a standby may take over this long after the
	// leader's last renewal (default 30).
	LeaderLeaseTTLSeconds float64 `toml:"leader_lease_ttl_seconds"`
	// LeaderFenceTimeoutSeconds: a leader that has not renewed for this long
	// stops acting as leader (default 20). Must be below the lease TTL.
	LeaderFenceTimeoutSeconds float64 `toml:"leader_fence_timeout_seconds"`
}

// API is the [api] table: the HTTP API every node serves.
type API struct {
	// Listen is the API's address (default 127.0.0.1:8765).
	Listen string `toml:"listen"`
	// TLSCert and TLSKey are PEM files; both or neither.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// AllowPlaintext permits a non-loopback listen address without TLS.
	AllowPlaintext bool `toml:"allow_plaintext"`
	// MetricsPublic serves /metrics without a token.
	MetricsPublic bool `toml:"metrics_public"`
	// Tokens are the API's bearer tokens, by SHA-256.
	Tokens []Token `toml:"tokens"`
}

// Token is one [[api.tokens]] entry.
type Token struct {
	Name string `toml:"name"`
	// Role is "viewer", "operator" or "admin".
	Role string `toml:"role"`
	// SHA256 is the hex SHA-256 of the token; the token itself is never
	// stored.
	SHA256 string `toml:"sha256"`
}

// Inbound types.
const (
	InboundMLLP = "mllp"
	InboundFile = "file"
)

// Inbound is one [[inbound]] entry: where messages come in.
type Inbound struct {
	// Name identifies the inbound in routes, logs and metrics.
	Name string `toml:"name"`
	// Type is "mllp" (a TCP listener) or "file" (a polled directory).
	Type string `toml:"type"`

	// Listen is the MLLP listener's address, host:port (a port from 1 to
	// 65535 that no other listener of the config binds).
	Listen string `toml:"listen"`
	// TLSCert and TLSKey (PEM) turn on TLS; ClientCA (PEM) also requires
	// and verifies client certificates (mutual TLS).
	TLSCert  string `toml:"tls_cert"`
	TLSKey   string `toml:"tls_key"`
	ClientCA string `toml:"client_ca"`
	// TLSClientNames, with ClientCA, admits only the clients whose
	// certificate carries one of these names: one of its DNS names
	// (subject alternative names) if it has any, else its subject CN,
	// compared without regard to ASCII case; a wildcard is only a name.
	// Empty admits every client certificate ClientCA verifies. (Omitted
	// from JSON when empty, so that the fingerprint of a config without it
	// is what it was before the key existed.)
	TLSClientNames []string `toml:"tls_client_names" json:"TLSClientNames,omitempty"`
	// ClientCRL, with ClientCA, lists files of certificate revocation
	// lists (PEM X509 CRL blocks, or one DER list a file), each signed by
	// a CA of ClientCA: a client certificate a list of its issuer revokes
	// is refused at the handshake. A list, not one file: each CA publishes
	// its own CRL, as a DER file at its distribution point, which a fetch
	// job keeps in a file of its own (DER lists cannot be concatenated).
	// (Omitted from JSON when empty, so that the fingerprint of a config
	// without it is what it was before the key existed.)
	ClientCRL []string `toml:"client_crl" json:"ClientCRL,omitempty"`
	// AllowPlaintext permits a non-loopback listen address without TLS.
	AllowPlaintext bool `toml:"allow_plaintext"`
	// ProcessingID, when set (P, T or D: HL7 table 0103), is the only
	// processing ID (MSH-11.1) the inbound takes: any other message, one
	// without MSH-11 included, is answered AR (condition 202) and kept as
	// rejected, so that a test system's messages never enter production.
	ProcessingID string `toml:"processing_id"`
	// MaxMessageBytes bounds one message (default 1 MiB); a larger frame is
	// answered AR and the connection closed, a larger message of an inbound
	// file is not stored (its bytes stay in the archived file).
	MaxMessageBytes int `toml:"max_message_bytes"`
	// MaxConnections bounds concurrent connections (default 100); more are
	// closed at once.
	MaxConnections int `toml:"max_connections"`
	// IdleTimeoutSeconds closes a connection that sends nothing for this
	// long between messages (default 300).
	IdleTimeoutSeconds float64 `toml:"idle_timeout_seconds"`
	// ReadTimeoutSeconds bounds the time to receive one whole frame once it
	// has started (default 30).
	ReadTimeoutSeconds float64 `toml:"read_timeout_seconds"`

	// Directory is the file inbound's watched directory.
	Directory string `toml:"directory"`
	// ArchiveDirectory receives each file once ingested (default
	// Directory/archive).
	ArchiveDirectory string `toml:"archive_directory"`
	// CreateDirectory lets a file inbound create Directory and
	// ArchiveDirectory at start when they are not there (default true).
	// False suits a share: one not mounted is then reported, not replaced
	// by a local directory polled empty.
	CreateDirectory bool `toml:"create_directory"`
	// PollIntervalSeconds is the file inbound's poll period (default 1).
	PollIntervalSeconds float64 `toml:"poll_interval_seconds"`
	// SettleSeconds: the file inbound reads a file only once its
	// modification time is at least this old (default 1; 0 reads it at
	// once), so that a file still being written is not read in part.
	SettleSeconds float64 `toml:"settle_seconds"`
	// MaxFileBytes bounds a file the file inbound reads (default 64 MiB, at
	// most MaxFileBytes): a larger one is not read, and holds up the later
	// files until it is moved away or the bound raised.
	MaxFileBytes int64 `toml:"max_file_bytes"`
}

// Outbound types.
const (
	OutboundMLLP = "mllp"
	OutboundFile = "file"
	OutboundHTTP = "http"
)

// What a lane does when a row has used max_attempts.
const (
	ExhaustedBlock = "block"
	ExhaustedDead  = "dead"
)

// Outbound is one [[outbound]] entry: a destination.
type Outbound struct {
	// Name identifies the destination in routes, lanes, logs and metrics.
	Name string `toml:"name"`
	// Type is "mllp", "file" or "http".
	Type string `toml:"type"`
	// Address is the MLLP destination's host:port.
	Address string `toml:"address"`
	// TLS turns on TLS to an MLLP destination; TLSCA (PEM) verifies its
	// certificate (default: the system roots), TLSCert and TLSKey present a
	// client certificate, ServerName overrides the verified name. An HTTP
	// destination uses TLS when its URL is https://, and these settings
	// need one.
	TLS        bool   `toml:"tls"`
	TLSCA      string `toml:"tls_ca"`
	TLSCert    string `toml:"tls_cert"`
	TLSKey     string `toml:"tls_key"`
	ServerName string `toml:"server_name"`
	// Connections is how many connections the destination's lanes share:
	// persistent MLLP connections (default 1: many receivers expect a
	// single connection), or HTTP requests in flight at once (default
	// DefaultHTTPConnections). Each lane still delivers one message at a
	// time. At most MaxOutboundConnections.
	Connections int `toml:"connections"`
	// Directory is the file destination's directory.
	Directory string `toml:"directory"`
	// CreateDirectory lets a file destination create its directory when it
	// is not there at its first write (default true). False for a directory
	// on a share: a share not mounted then fails the send instead of the
	// directory being made, and written to, on the local disk.
	CreateDirectory bool `toml:"create_directory"`
	// URL is the HTTP destination's URL (POST).
	URL string `toml:"url"`
	// MaxAttempts is how many deliveries a row gets before on_exhausted
	// applies; 0 (default) never gives up.
	MaxAttempts int `toml:"max_attempts"`
	// RetryBaseSeconds and RetryMaxSeconds bound the exponential backoff
	// between attempts (defaults 1 and 300).
	RetryBaseSeconds float64 `toml:"retry_base_seconds"`
	RetryMaxSeconds  float64 `toml:"retry_max_seconds"`
	// OnExhausted is "block" (default: the lane waits for an operator) or
	// "dead" (the row is set aside and the lane moves on).
	OnExhausted string `toml:"on_exhausted"`
	// TimeoutSeconds bounds one delivery (default 30); it must be below
	// [store] lease_ttl_seconds.
	TimeoutSeconds float64 `toml:"timeout_seconds"`
}

// Route is one [[route]] entry: which inbound feeds which outbounds.
type Route struct {
	// From names an inbound.
	From string `toml:"from"`
	// To names one or more outbounds.
	To []string `toml:"to"`
	// Filter maps HL7 field paths to the value they must have, all of them
	// (e.g. {"MSH-9.1" = "ADT"}).
	Filter map[string]string `toml:"filter"`
	// LaneKey is the HL7 field path whose value splits each destination
	// into FIFO lanes (e.g. "PID-3.1"); empty means one lane per
	// destination.
	LaneKey string `toml:"lane_key"`
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// LeaseTTL is the per-row delivery lease.
func (s Store) LeaseTTL() time.Duration { return seconds(s.LeaseTTLSeconds) }

// Retention is how long finished rows are kept.
func (s Store) Retention() time.Duration { return seconds(s.RetentionDays * 86400) }

// Heartbeat is the cluster's heartbeat interval.
func (c Cluster) Heartbeat() time.Duration { return seconds(c.HeartbeatSeconds) }

// NodeTimeout is how long an unseen node is still alive.
func (c Cluster) NodeTimeout() time.Duration { return seconds(c.NodeTimeoutSeconds) }

// ReclaimInterval is the expired-lease sweep's period.
func (c Cluster) ReclaimInterval() time.Duration { return seconds(c.ReclaimIntervalSeconds) }

// LeaderLeaseTTL is the leader lease's lifetime.
func (c Cluster) LeaderLeaseTTL() time.Duration { return seconds(c.LeaderLeaseTTLSeconds) }

// LeaderFenceTimeout is the leader's trust window.
func (c Cluster) LeaderFenceTimeout() time.Duration { return seconds(c.LeaderFenceTimeoutSeconds) }

// IdleTimeout closes a silent connection.
func (i Inbound) IdleTimeout() time.Duration { return seconds(i.IdleTimeoutSeconds) }

// ReadTimeout bounds the receipt of one frame.
func (i Inbound) ReadTimeout() time.Duration { return seconds(i.ReadTimeoutSeconds) }

// PollInterval is the file inbound's poll period.
func (i Inbound) PollInterval() time.Duration { return seconds(i.PollIntervalSeconds) }

// Settle is how old a file's modification time must be before the file
// inbound reads it.
func (i Inbound) Settle() time.Duration { return seconds(i.SettleSeconds) }

// DefaultSettleSeconds is settle_seconds when the file does not set it.
const DefaultSettleSeconds = 1

// RetryBase is the first backoff.
func (o Outbound) RetryBase() time.Duration { return seconds(o.RetryBaseSeconds) }

// RetryMax caps the backoff.
func (o Outbound) RetryMax() time.Duration { return seconds(o.RetryMaxSeconds) }

// Timeout bounds one delivery.
func (o Outbound) Timeout() time.Duration { return seconds(o.TimeoutSeconds) }
