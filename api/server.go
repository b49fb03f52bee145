// Package api is the HTTP API every node serves, primary or standby (it is
// not part of the leader-only graph): health and readiness for load
// balancers, cluster membership for monitoring, Prometheus metrics, lanes,
// messages (a search, one message, a resend), and the operator's actions on
// blocked lanes and on outbounds (hold, release, resend-dead). Every endpoint but
// /health and /ready needs a bearer token whose role carries its permission
// (DESIGN §8).
package api

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/accept"
	"github.com/messagefoundry/mf/internal/tlsfiles"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/storage"
)

// Options configure a Server.
type Options struct {
	Config *config.Config
	Store  storage.Store
	// Status reads the node's role (actors.Engine.Status).
	Status func() actors.Status
	// CheckReload says whether this node's config file would reload
	// (actors.Engine.CheckReload); POST /config/reload asks it before it
	// bumps the shared version. Nil: not asked.
	CheckReload func() error
	// InForce returns the config this node runs now (actors.Engine.Config),
	// whose [[outbound]] and [[route]] a resend follows; nil, or a nil
	// answer (the engine not started yet): Config.
	InForce func() *config.Config
	// OutboundHeld tells this node's lane manager, if it runs one, of an
	// operator's hold (held) or release of an outbound, once the store has
	// it (actors.Engine.OutboundHeld), so that the answer comes after the
	// lanes have seen it. Nil: not told (the primary's rescan reads it).
	OutboundHeld func(ctx context.Context, outbound string, held bool) error
	// QueueChanged tells this node's lane manager, if it runs one, of an
	// operator's retry or skip of a queue row, once the store has it
	// (actors.Engine.QueueChanged), so that the answer comes after the
	// lanes have begun to look for it. Nil: not told (the primary's rescan
	// reads it).
	QueueChanged func(ctx context.Context) error
	// ConfigDrift reports whether this node's graph config differs from
	// the primary's (leadership.ConfigDiffers: from the first heartbeat
	// that sees it, before mf_config_drift turns 1 a minute later). A
	// resend computes each message's lane from the answering node's
	// routes: through a node that drifted it could queue a message in a
	// lane of a lane_key the primary does not run, out of order with the
	// rest of its key, so it is refused there (refuseDrifted). Nil: never.
	ConfigDrift func() bool
	Log         zerolog.Logger
}

// Server is the API of one node.
type Server struct {
	o      Options
	limits limits
	http   *http.Server
	conns  *connCap
	// cert is the API's own certificate and key (tls_cert, tls_key) as on
	// disk, nil without TLS: a renewal is served from the next handshake,
	// and a failed handshake says when it is out of its dates. Set before
	// the server serves.
	cert *tlsfiles.Pair
	// stopLooks ends the looks at cert between handshakes (Start), once.
	stopLooks chan struct{}
	stopOnce  sync.Once
	ln        net.Listener
	// laneHash names lanes for tokens without MESSAGE_READ.
	laneHash laneHasher
	// unready and unscraped count the failed store calls of GET /ready
	// and GET /metrics, which machines poll (a readiness probe, a load
	// balancer, Prometheus): a database away is logged when it starts,
	// once a minute while it lasts and when it ends, not at every poll.
	unready, unscraped storage.Outage
	// stats keeps the queue counts GET /metrics shows (queueStatsMaxAge).
	stats statsCache
	// unread follows the store reads behind GET /lanes, /messages/{id}
	// and /cluster/nodes, which dashboards poll.
	unread storage.Outage
	// readyPing is the store ping of GET /ready in flight, if any.
	readyPing pingFlight
	// unknownToken and forbidden count the requests refused for their
	// credential (401 with a token, 403), logged once a minute at most.
	unknownToken, forbidden refusals
	// handshakes counts the failed TLS handshakes serverLog logs at WARN,
	// once a minute at most.
	handshakes refusals
}

// pingFlight shares one store ping among the GET /ready requests that come
// while it runs. /ready needs no token, and each request held a connection
// of the store's pool (pool_size, 5 by default) for its own ping: whoever
// could reach the API could keep the pool busy and hold up the store calls
// of every message behind it. Now /ready holds one connection at most.
type pingFlight struct {
	mu   sync.Mutex
	call *pingCall
}

type pingCall struct {
	done chan struct{}
	err  error
}

// ping returns the outcome of the ping in flight, or of a new one, unless
// ctx ends first. The ping runs apart from any request, with readyTimeout,
// so that a client gone does not fail it for the others.
func (f *pingFlight) ping(ctx context.Context, store storage.Store) error {
	f.mu.Lock()
	c := f.call
	if c == nil {
		c = &pingCall{done: make(chan struct{})}
		f.call = c
		go func() {
			pctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
			c.err = store.Ping(pctx)
			cancel()
			f.mu.Lock()
			f.call = nil
			f.mu.Unlock()
			close(c.done)
		}()
	}
	f.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readyTimeout bounds the store check of /ready.
const readyTimeout = 2 * time.Second

// limits bound what one client may hold of the server: a connection, its
// goroutine and a file descriptor, from the process's one limit that the
// MLLP listeners and the store's pool draw on too. Every phase of a
// request has a deadline, so a client that stalls in any of them, on
// purpose or not, is let go.
type limits struct {
	// readHeader bounds the request line and headers.
	readHeader time.Duration
	// read bounds the whole request, body included. No endpoint takes a
	// body, but net/http reads what a client announced (to keep the
	// connection) before it sends the answer, and that read has no other
	// deadline: headers with Content-Length: 100000 and no body held the
	// connection for good.
	read time.Duration
	// write bounds the rest, from the end of the headers to the end of the
	// answer, handler included. Answers are small (/ready's store check
	// has 2 s), but for GET /messages/{id}, whose payload may be as large
	// as max_message_bytes allows; that one gets more (minClientRate).
	write time.Duration
	// idle bounds a kept-alive connection between requests.
	idle time.Duration
	// maxHeaderBytes bounds the headers (net/http's default is 1 MiB; a
	// bearer token and a few headers need a few hundred bytes).
	maxHeaderBytes int
	// storeRead bounds the store calls of a request that reads little
	// (cluster nodes, metrics, a message). A database that takes the
	// connection and never answers (a host that drops packets, a pool
	// whose connections are all stuck) otherwise holds the request until
	// the client gives up: a monitoring check gets a timeout where it
	// should get a 503 saying why, and a scrape loses mf_is_leader and
	// mf_store_errors_total, the series that tell the outage. Below
	// Prometheus's default scrape timeout (10 s).
	storeRead time.Duration
	// storeScan bounds GET /lanes, which reads every unfinished row: a
	// backlog of a million rows in 100,000 lanes takes PostgreSQL 2 s, so
	// it gets more, and still answers within the write timeout.
	storeScan time.Duration
	// statsMaxAge is queueStatsMaxAge (tests shorten it with the rest).
	statsMaxAge time.Duration
	// storeWrite bounds an operator's write (retry, skip, reload): longer,
	// since SQLite lets a write wait its busy timeout (10 s) for the lock.
	storeWrite time.Duration
	// maxConns bounds the connections the API holds open at once (see
	// connCap); 0 is apiConnsFor the process's limit of file descriptors.
	maxConns int
}

var defaultLimits = limits{
	readHeader:     10 * time.Second,
	read:           15 * time.Second,
	write:          60 * time.Second,
	idle:           2 * time.Minute,
	maxHeaderBytes: 64 << 10,
	storeRead:      5 * time.Second,
	storeScan:      30 * time.Second,
	statsMaxAge:    queueStatsMaxAge,
	storeWrite:     15 * time.Second,
}

// minClientRate is the slowest reading, in bytes per second, a large answer
// is given time for on top of limits.write: 1 MiB, the default
// max_message_bytes, gets 16 s more.
const minClientRate = 64 << 10

// New builds the server; Start binds it.
func New(o Options) *Server { return newServer(o, defaultLimits) }

func newServer(o Options, l limits) *Server {
	if l.maxConns <= 0 {
		l.maxConns = apiConnsFor(fdLimit())
	}
	s := &Server{o: o, limits: l, laneHash: laneHasher{store: o.Store}}
	s.conns = newConnCap(nil, l.maxConns, o.Log.With().Str("component", "api").Logger())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /ready", s.ready)
	mux.HandleFunc("GET /cluster/status", s.require(MonitoringRead, s.clusterStatus))
	mux.HandleFunc("GET /cluster/nodes", s.require(MonitoringRead, s.clusterNodes))
	mux.HandleFunc("GET /metrics", s.require(MonitoringRead, s.metrics))
	mux.HandleFunc("GET /lanes", s.require(MonitoringRead, s.lanes))
	mux.HandleFunc("GET /messages", s.require(MessageRead, s.messageSearch))
	mux.HandleFunc("GET /messages/{id}", s.require(MessageRead, s.message))
	mux.HandleFunc("POST /messages/{id}/resend", s.require(QueueWrite, noBody("?destination=NAME", s.messageResend)))
	mux.HandleFunc("POST /queue/{id}/retry", s.require(QueueWrite, noBody("", s.queueRetry)))
	mux.HandleFunc("POST /queue/{id}/skip", s.require(QueueWrite, noBody("", s.queueSkip)))
	mux.HandleFunc("POST /outbounds/{name}/hold", s.require(QueueWrite, noBody("", s.outboundHold)))
	mux.HandleFunc("POST /outbounds/{name}/release", s.require(QueueWrite, noBody("", s.outboundRelease)))
	mux.HandleFunc("POST /outbounds/{name}/resend-dead", s.require(QueueWrite, noBody("?since=&until=&limit=", s.outboundResendDead)))
	mux.HandleFunc("POST /config/reload", s.require(ConfigWrite, noBody("", s.configReload)))
	// The catch-all matches every method, so it also sees a known path
	// asked with a method it does not serve: that is a 405 naming the
	// methods it does serve (RFC 9110 §15.5.6), not a 404.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": method not allowed (allowed: "+strings.Join(allow, ", ")+")")
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	s.http = &http.Server{Handler: jsonAnswers(mux), ReadHeaderTimeout: l.readHeader, ReadTimeout: l.read, WriteTimeout: l.write,
		IdleTimeout: l.idle, MaxHeaderBytes: l.maxHeaderBytes, ErrorLog: log.New(serverLog{o.Log, s}, "", 0), ConnState: s.conns.state}
	registerMetrics(o.Config)
	return s
}

// serverLog turns what net/http reports itself (a failed TLS handshake, an
// accept error, a handler's panic) into lines of the node's log: by default
// it writes plain text on stderr, in the middle of the JSON log.
type serverLog struct {
	log zerolog.Logger
	s   *Server
}

func (l serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if !strings.HasPrefix(msg, "http: TLS handshake error") {
		l.log.Warn().Str("component", "api").Msg(msg)
		return len(p), nil
	}
	// A connection closed before its handshake: a load balancer's
	// TCP-connect check, every few seconds, closing cleanly (EOF) or with a
	// reset (HAProxy's).
	if strings.HasSuffix(msg, ": EOF") || closedByReset(msg) {
		l.log.Debug().Str("component", "api").Msg(msg)
		return len(p), nil
	}
	// Anyone who reaches the port can fail a handshake (plain HTTP to the
	// HTTPS port, a scanner): logged as a refused token is, or they
	// could write the log without end.
	log, unlogged := l.s.handshakes.note(time.Now())
	if !log {
		return len(p), nil
	}
	if l.s.cert != nil {
		// A client refuses an expired certificate of the API's, and its
		// alert ("bad certificate") names none.
		if why := config.CertOutOfDate(l.s.cert.Leaf(), time.Now()); why != "" {
			msg += "; the API's own certificate (tls_cert " + l.s.o.Config.API.TLSCert + ") " + why + ", which clients refuse: renew it (the next handshake takes the renewed files, no restart needed)"
		}
	}
	l.log.Warn().Str("component", "api").Int("unlogged", unlogged).
		Msg(msg + " (failed handshakes are logged at most once a minute, with how many more came)")
	return len(p), nil
}

// closedByReset reports whether a failed handshake's line (net/http's, which
// carries the error as text only) says the client reset the connection:
// "connection reset by peer" on Unix, WSAECONNRESET's words on Windows.
func closedByReset(msg string) bool {
	return strings.HasSuffix(msg, "connection reset by peer") || strings.HasSuffix(msg, "forcibly closed by the remote host.")
}

// Handler exposes the routes (for tests).
func (s *Server) Handler() http.Handler { return s.http.Handler }

// Start binds [api] listen, with TLS when configured, and serves in the
// background.
func (s *Server) Start() error {
	a := s.o.Config.API
	if a.TLSCert != "" {
		// Loaded before the port is bound: loaded by ServeTLS, in the
		// serving goroutine, a pair that failed left the port bound and
		// accepting connections that nobody answered.
		cert, err := tlsfiles.LoadPair(tlsfiles.Endpoint{Kind: "api", Name: "api"}, a.TLSCert, a.TLSKey, s.o.Log.With().Str("component", "api").Logger())
		if err != nil {
			return fmt.Errorf("load [api] tls_cert and tls_key: %w", err)
		}
		s.http.TLSConfig = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Certificate(), nil }}
		s.cert = cert
		// A look between handshakes too, as a listener's: a client that
		// keeps its connection (Prometheus) makes none for hours, and the
		// expiry series would say the old certificate's date meanwhile.
		s.stopLooks = make(chan struct{})
		go func() {
			t := time.NewTicker(tlsfiles.IdleLook)
			defer t.Stop()
			for {
				select {
				case <-s.stopLooks:
					return
				case <-t.C:
					cert.Certificate()
				}
			}
		}()
	}
	ln, err := net.Listen("tcp", a.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (config [api] listen): %w", a.Listen, err)
	}
	// Out of file descriptors, net/http logged each accept it retried, once
	// a second for as long as it lasted; the guard logs once a minute and
	// closes the connections it cannot serve.
	ln = accept.NewGuard(ln, s.o.Log.With().Str("component", "api").Logger(), "the API", nil)
	// Bounded below the process's descriptors, so that clients of the
	// API cannot starve the MLLP listeners of them.
	s.conns.Listener = ln
	s.ln = s.conns
	ln = s.conns
	go func() {
		var err error
		if a.TLSCert != "" {
			err = s.http.ServeTLS(ln, "", "") // the pair is in TLSConfig
		} else {
			err = s.http.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.o.Log.Error().Err(err).Msg("the API server stopped")
		}
	}()
	s.o.Log.Info().Str("listen", ln.Addr().String()).Bool("tls", a.TLSCert != "").Msg("API listening")
	return nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops the server, letting requests in flight finish.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.stopLooks != nil {
		s.stopOnce.Do(func() { close(s.stopLooks) })
	}
	return s.http.Shutdown(ctx)
}

// noBody refuses a request with a body (400, nothing done) before h runs:
// no POST of this API reads one, its arguments (query, "" for none) are in
// the query string. Ignored, a body widened the act it meant to narrow: a
// resend given {"destination": "lab"} went to every destination, a
// resend-dead given {"limit": 1} resent every dead row. A body sent in
// chunks (no Content-Length) is looked at for one byte.
func noBody(query string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if hasBody(r) {
			msg := r.Method + " " + r.URL.Path + " takes no body, and nothing was done: "
			if query == "" {
				msg += "it takes no arguments"
			} else {
				msg += "its arguments go in the query string (" + query + ")"
			}
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		// An act that takes no arguments refuses a query string as it
		// refuses a body: POST /outbounds/emr/hold?until=... held with no
		// end, and /queue/1/skip?lane=... skipped row 1 whatever the lane
		// said, both answered 200.
		if query == "" && r.URL.RawQuery != "" {
			writeError(w, http.StatusBadRequest, r.Method+" "+r.URL.Path+" takes no arguments, and nothing was done: leave out the query string")
			return
		}
		h(w, r)
	}
}

// hasBody reports whether r carries a body: a Content-Length above 0, or a
// first byte of one sent in chunks.
func hasBody(r *http.Request) bool {
	if r.ContentLength >= 0 || r.Body == nil {
		return r.ContentLength > 0
	}
	var one [1]byte
	n, _ := io.ReadFull(r.Body, one[:])
	return n > 0
}

// jsonAnswers makes the answers the mux writes itself JSON like every
// other: a redirect to the cleaned path (GET //health: 307 to /health, with
// an HTML body or none), a bare 400 for the request target "*", a text 404
// for a CONNECT. A monitoring client reads {"error": ...} from any answer
// that is not 2xx; the redirect keeps its status and Location, so a client
// that follows redirects works as before. What net/http refuses before any
// handler runs (a malformed request line or Host, headers over
// maxHeaderBytes, an HTTP version it does not speak) it writes itself, as
// text: no handler can change that.
func jsonAnswers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An answer may carry PHI (a message, a lane key, a destination's
		// words): no proxy or browser cache may keep it.
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(&jsonWriter{ResponseWriter: w, r: r}, r)
	})
}

// jsonWriter replaces an answer of 300 or more that is not JSON by a JSON
// error of the same status; JSON answers and 2xx pass as they are.
type jsonWriter struct {
	http.ResponseWriter
	r       *http.Request
	started bool // the status line is decided
	dropped bool // the handler's own body is discarded
}

func (w *jsonWriter) WriteHeader(code int) {
	if code < 200 { // informational: the final status is still to come
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if w.started {
		return
	}
	w.started = true
	if code < 300 || strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.dropped = true
	msg := strings.ToLower(http.StatusText(code)) + ": " + w.r.Method + " " + w.r.RequestURI
	if loc := w.Header().Get("Location"); loc != "" && code < 400 {
		msg = w.r.Method + " " + w.r.URL.EscapedPath() + ": the path is not in its clean form; ask " + loc + " (Location)"
	}
	w.Header().Del("Content-Length")
	writeError(w.ResponseWriter, code, msg)
}

func (w *jsonWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.dropped {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.NewResponseController reach the connection (the write
// deadline of GET /messages/{id}).
func (w *jsonWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// probeMethods are the methods allowedMethods tries on a path: every one a
// route could be registered for.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods returns the methods some route other than the catch-all
// serves r's path with (GET brings HEAD), none for an unknown path. It asks
// the mux itself, so it cannot drift from the routes.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range probeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	return allow
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// storeFailed answers 503 for a store error, without its detail (which may
// name hosts); the log has it.
func (s *Server) storeFailed(w http.ResponseWriter, op string, err error) {
	// Reads are polled (a dashboard's /lanes every few seconds): logged
	// when they start failing, once a minute, and when one works again
	// (readWorked), not at every request.
	if log, n := s.unread.Failed(time.Now()); log {
		s.o.Log.Error().Err(err).Str("op", op).Int("failures", n).
			Msg("API: store reads fail, answered 503 (logged when it starts and once a minute while it lasts); is the database reachable?")
	}
	s.answerStoreFailed(w, op, err)
}

// readWorked records a store read that worked, ending an outage of reads.
func (s *Server) readWorked() {
	if n := s.unread.Over(); n > 0 {
		s.o.Log.Info().Int("failures", n).Msg("API: store reads work again")
	}
}

// answerStoreFailed answers a store call that failed with a 503.
func (s *Server) answerStoreFailed(w http.ResponseWriter, op string, err error) {
	if errors.Is(err, context.DeadlineExceeded) {
		writeError(w, http.StatusServiceUnavailable, "the store did not answer in time ("+op+")")
		return
	}
	writeError(w, http.StatusServiceUnavailable, "the store is unavailable ("+op+")")
}

// storeWriteFailed is storeFailed for a write, whose outcome a deadline
// leaves unknown: the database may have committed it before the call gave
// up.
func (s *Server) storeWriteFailed(w http.ResponseWriter, op string, err error) {
	// An operator's action: each failure is logged (they are rare, and
	// each is someone's request that did not happen).
	s.o.Log.Error().Err(err).Str("op", op).Msg("API: store call failed")
	if !errors.Is(err, context.DeadlineExceeded) {
		s.answerStoreFailed(w, op, err)
		return
	}
	writeError(w, http.StatusServiceUnavailable, "the store did not answer in time ("+op+"); it may still have been applied")
}

// storeCtx is the context of a request's store calls: the request's, ended
// after limit (one of limits.store*).
func storeCtx(r *http.Request, limit time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), limit)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// ready is 200 when the store answers and is migrated and, on a primary,
// every MLLP listener holds its port; else 503 with why, in "reason" and,
// as every answer that is not 2xx, in "error".
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.readyPing.ping(ctx, s.o.Store); err != nil {
		reason := "the store is unreachable or not migrated"
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			reason = "the store did not answer within " + readyTimeout.String()
		case errors.Is(err, storage.ErrDamaged):
			reason = "the store's database file is damaged: restore it from a backup (the log says how)"
		case errors.Is(err, storage.ErrReadOnly) && !s.o.Store.Clusterable():
			// An embedded file: no standby to blame, its file system is.
			reason = "the store's file takes no writes (its file system read-only?): make it writable (the log says what failed)"
		case errors.Is(err, storage.ErrReadOnly):
			reason = "the store is read-only (a standby?): point [store] url at the primary"
		}
		if log, n := s.unready.Failed(time.Now()); log {
			s.o.Log.Warn().Err(err).Int("failures", n).Msg("not ready: " + reason + " (logged once a minute while it lasts)")
		}
		unavailable(w, reason)
		return
	}
	if n := s.unready.Over(); n > 0 {
		s.o.Log.Info().Int("failures", n).Msg("ready again: the store answers")
	}
	// Listeners run only on the leader; the listener logs each failure.
	if s.o.Status == nil {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	if st := s.o.Status(); st.Leader && len(st.Unbound) > 0 {
		reasons := make([]string, len(st.Unbound))
		for i, u := range st.Unbound {
			reasons[i] = u.Reason()
		}
		unavailable(w, strings.Join(reasons, "; "))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// unavailable is /ready's 503.
func unavailable(w http.ResponseWriter, reason string) {
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": reason, "error": reason})
}

// Lane is one entry of GET /lanes.
type Lane struct {
	// Lane is "destination/key". The key is often a patient id, so a
	// token without MESSAGE_READ sees "destination/#" and 12 hex digits
	// instead: the first 6 bytes of HMAC-SHA256 of the lane, keyed by the
	// cluster's secret LaneHashSecret, kept in the database (mf_secrets).
	// Without the key, which a viewer never sees, a short key such as an
	// MRN cannot be found by trying every value; with the one key of the
	// cluster, a lane keeps its name on every node, across failovers and
	// restarts.
	Lane        string  `json:"lane"`
	Destination string  `json:"destination"`
	Depth       int64   `json:"depth"`
	HeadID      int64   `json:"head_id"`
	HeadAge     float64 `json:"head_age_seconds"`
	Blocked     bool    `json:"blocked"`
	Attempts    int64   `json:"attempts"`
	// LastError is the head's last failure; the destination's own words in
	// it only for a token with MESSAGE_READ.
	LastError string `json:"last_error"`
	// OutboundHeld is true, and present, only while an operator holds the
	// lane's outbound (POST /outbounds/{name}/hold): the lane sends nothing
	// until it is released. It is not Blocked.
	OutboundHeld bool `json:"outbound_held,omitempty"`
}

// MaxLanesLimit bounds GET /lanes?limit=.
const MaxLanesLimit = 10000

// LanePage is GET /lanes?limit=N[&after=CURSOR]: up to limit lanes, in the
// store's order of lane names, and the after of the next page (null on the
// last).
type LanePage struct {
	Lanes     []Lane  `json:"lanes"`
	NextAfter *string `json:"next_after"`
}

// lanesParams are the parameters GET /lanes takes, each at most once.
var lanesParams = []string{"limit", "after"}

// lanes is GET /lanes: every lane with work, or with limit a page of them.
// Without limit it reads every unfinished row (3 s and more for 500,000);
// a page reads its own lanes' rows only. Any other parameter is refused, as
// GET /messages refuses one: a misspelt limit (limt=) read every row.
func (s *Server) lanes(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r, lanesParams)
	if !ok {
		return
	}
	limit, cursor := 0, q["after"]
	if v, given := q["limit"]; given {
		n, ok := positive(w, "limit", v, MaxLanesLimit)
		if !ok {
			return
		}
		limit = int(n)
	}
	if cursor != "" && limit == 0 {
		badParam(w, "after", "needs limit (after is the next_after of a page of limit lanes)")
		return
	}
	ctx, cancel := storeCtx(r, s.limits.storeScan)
	defer cancel()
	holds, err := s.o.Store.OutboundHolds(ctx)
	if err != nil {
		s.storeFailed(w, "outbound holds", err)
		return
	}
	held := heldOutbounds(holds)
	p := storage.QueueLanesParams{}
	if limit > 0 {
		p.Limit = limit + 1 // one more: is there a next page?
	}
	if cursor != "" {
		if p.After, err = s.laneHash.lane(ctx, cursor); errors.Is(err, errCursor) {
			badParam(w, "after", "not a next_after this cluster gave: pass the next_after of the page before unchanged")
			return
		} else if err != nil {
			s.storeFailed(w, "lane hash key", err)
			return
		}
	}
	ls, err := s.o.Store.QueueLanes(ctx, p)
	if err != nil {
		s.storeFailed(w, "queue lanes", err)
		return
	}
	s.readWorked()
	var next *string
	if limit > 0 && len(ls) > limit {
		ls = ls[:limit]
		c, err := s.laneHash.cursor(ctx, ls[limit-1].Lane)
		if err != nil {
			s.storeFailed(w, "lane hash key", err)
			return
		}
		next = &c
	}
	who := principalOf(r)
	phi := HasPermission(who.role, MessageRead)
	out := []Lane{}
	for _, l := range ls {
		name := l.Lane
		if !phi && len(name) > len(l.Destination)+1 {
			if name, err = s.laneHash.hash(ctx, l.Destination, name); err != nil {
				s.storeFailed(w, "lane hash key", err)
				return
			}
		}
		out = append(out, Lane{
			Lane: name, Destination: l.Destination, Depth: l.Depth, HeadID: l.Head.ID,
			// Never negative: a database clock stepped back since the row
			// was queued makes the raw age so (leadership/doc.go, Clocks).
			HeadAge: max(0, l.HeadAge.Seconds()), Blocked: l.Blocked(), Attempts: l.Head.Attempts, LastError: lastError(l.Head, phi),
			OutboundHeld: held[l.Destination],
		})
	}
	if limit > 0 {
		writeJSON(w, http.StatusOK, LanePage{Lanes: out, NextAfter: next})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"lanes": out})
}

// lastError is a queue row's last error as a reader may see it: with the
// destination's own explanation only under MESSAGE_READ (phi), since it may
// quote the message's fields.
func lastError(r storage.QueueRow, phi bool) string {
	if !phi || r.LastErrorDetail == "" {
		return r.LastError
	}
	return r.LastError + ": " + r.LastErrorDetail
}

// MessageHead is what GET /messages/{id} and GET /messages say of a
// message, its payload aside.
type MessageHead struct {
	ID          int64    `json:"id"`
	Inbound     string   `json:"inbound"`
	ReceivedAt  *float64 `json:"received_at"`
	ControlID   string   `json:"control_id"`
	MessageType string   `json:"message_type"`
	Status      string   `json:"status"`
	Error       string   `json:"error"`
}

// messageHead is m's MessageHead.
func messageHead(m storage.Message) MessageHead {
	return MessageHead{ID: m.ID, Inbound: m.Inbound, ReceivedAt: epoch(m.ReceivedAt), ControlID: m.ControlID,
		MessageType: m.MessageType, Status: m.Status, Error: m.Error}
}

// Message is GET /messages/{id} (written by messageAnswer, which streams
// the payload).
type Message struct {
	MessageHead
	Payload string `json:"payload"`
	// PayloadBase64 is the payload's bytes in base64 when they are not
	// UTF-8 (HL7 v2 is often Latin-1, MSH-18 8859/1): a JSON string holds
	// only UTF-8, so Payload then has U+FFFD for each byte that is not, and
	// only this field has the message as received. null when Payload is
	// exact.
	PayloadBase64 *string    `json:"payload_base64"`
	Queue         []QueueRow `json:"queue"`
}

// QueueRow is one delivery of a Message.
type QueueRow struct {
	ID            int64    `json:"id"`
	Destination   string   `json:"destination"`
	Lane          string   `json:"lane"`
	Status        string   `json:"status"`
	Held          bool     `json:"held"`
	Attempts      int64    `json:"attempts"`
	NextAttemptAt *float64 `json:"next_attempt_at"`
	LastError     string   `json:"last_error"`
	UpdatedAt     *float64 `json:"updated_at"`
	// ResentAs is, on a dead row an operator resent (POST
	// /messages/{id}/resend, POST /outbounds/{name}/resend-dead), the id of
	// the new row of the message; null on any other row.
	ResentAs *int64 `json:"resent_as"`
}

func (s *Server) message(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	ctx, cancel := storeCtx(r, s.limits.storeRead)
	defer cancel()
	d, err := s.o.Store.MessageRead(ctx, id)
	if err == nil || errors.Is(err, storage.ErrNotFound) {
		s.readWorked()
	}
	if errors.Is(err, storage.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no message "+strconv.FormatInt(id, 10))
		return
	}
	if err != nil {
		s.storeFailed(w, "message read", err)
		return
	}
	// An access log of patient data shown, as a hospital's audit of PHI
	// access asks: who (the token's name), which message, from where; never
	// what it holds.
	// HEAD (served by the GET route) shows the headers alone: that the
	// message exists, and its size.
	what := "message read: its content (PHI) was shown"
	if r.Method == http.MethodHead {
		what = "message looked up (HEAD): its content was not shown"
	}
	s.o.Log.Info().Int64("message_id", id).Str("control_id", d.Message.ControlID).Str("token", principalOf(r).name).Str("remote", r.RemoteAddr).
		Msg(what)
	m := d.Message
	queue := []QueueRow{}
	for _, q := range d.Queue {
		row := QueueRow{ID: q.ID, Destination: q.Destination, Lane: q.Lane, Status: q.Status,
			Held: q.Held, Attempts: q.Attempts, NextAttemptAt: epoch(q.NextAttemptAt), LastError: lastError(q, true), UpdatedAt: epoch(q.UpdatedAt)}
		if q.ResentAs != 0 {
			row.ResentAs = &q.ResentAs
		}
		queue = append(queue, row)
	}
	answer := messageAnswer{head: messageHead(m), payload: m.Payload, queue: queue}
	// Counted before it is written, by the same code: its length is the
	// Content-Length (a HEAD gives the size) and sets the deadline below.
	var size byteCount
	if err := answer.writeTo(&size); err != nil {
		writeError(w, http.StatusInternalServerError, "message "+strconv.FormatInt(id, 10)+" cannot be encoded")
		return
	}
	// A message may be far larger than any other answer: give its transfer
	// time at minClientRate beyond the write timeout. Where the connection
	// cannot take a deadline (not net/http's own), the server's stays.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.limits.write + time.Duration(size)*time.Second/minClientRate))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.FormatInt(int64(size), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	// A failure here is the client's going (or its deadline): the status
	// is sent, nothing is left to tell it.
	_ = answer.writeTo(w)
}

func (s *Server) queueRetry(w http.ResponseWriter, r *http.Request) {
	s.queueAction(w, r, "retry", func(ctx context.Context, id int64) (storage.QueueActed, error) {
		return s.o.Store.QueueRelease(ctx, storage.QueueReleaseParams{ID: id})
	})
}

func (s *Server) queueSkip(w http.ResponseWriter, r *http.Request) {
	who := principalOf(r)
	s.queueAction(w, r, "skip", func(ctx context.Context, id int64) (storage.QueueActed, error) {
		return s.o.Store.QueueSkip(ctx, storage.QueueSkipParams{ID: id, Reason: "skipped by operator " + who.name})
	})
}

// queueAction runs an operator action on a queue row: 404 if there is no
// such row, 409 if it is in flight or finished (notPending says which) or,
// for a skip, if it is pending behind its lane's head (notHead). Once the
// store has made it, this node's lane manager is told (tellQueue) before
// the 200.
func (s *Server) queueAction(w http.ResponseWriter, r *http.Request, action string, do func(context.Context, int64) (storage.QueueActed, error)) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	ctx, cancel := storeCtx(r, s.limits.storeWrite)
	defer cancel()
	acted, err := do(ctx, id)
	switch {
	case err == nil:
		s.stats.drop()
		who := principalOf(r)
		// The audit line names the message and its destination: the queue
		// id alone leads nowhere once the row is purged. Not the lane,
		// whose key is a patient's identifier.
		s.o.Log.Info().Int64("queue_id", id).Int64("message_id", acted.MessageID).Str("destination", acted.Destination).
			Str("action", action).Str("token", who.name).Msg("operator action on a queue row")
		s.tellQueue(ctx, id, action)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "action": action})
	case errors.Is(err, storage.ErrNotFound):
		writeError(w, http.StatusNotFound, "no queue row "+strconv.FormatInt(id, 10))
	case errors.Is(err, storage.ErrNotPending):
		var np storage.NotPending
		errors.As(err, &np) // a bare ErrNotPending leaves the status unknown
		writeError(w, http.StatusConflict, notPending(id, action, np.Status))
	case errors.Is(err, storage.ErrNotHead):
		var nh storage.NotHead
		errors.As(err, &nh) // a bare ErrNotHead leaves the head unknown
		writeError(w, http.StatusConflict, notHead(id, nh.Head))
	default:
		s.storeWriteFailed(w, "queue "+action, err)
	}
}

// tellQueue tells this node's lane manager of a retry or skip (action) of
// queue row id the store has just made (Options.QueueChanged), so that the
// row's lane acts on it before the answer. A failure is logged, not
// answered: the action is stored, and the manager's next rescan reads it.
func (s *Server) tellQueue(ctx context.Context, id int64, action string) {
	if s.o.QueueChanged == nil {
		return
	}
	if err := s.o.QueueChanged(ctx); err != nil {
		s.o.Log.Warn().Err(err).Int64("queue_id", id).Str("action", action).
			Msg(fmt.Sprintf("the lane manager was not told of the operator's action on the queue row at once (it may be stopping); it reads it from the store within %v", lanes.RescanInterval))
	}
}

// notPending is the error of the 409 to a retry or skip (action) of queue
// row id, whose status the store found was status (storage.NotPending):
// whether it is being delivered (wait, and look again) or finished (nothing
// to retry), or, if a delivery ended between the action and its look, pending
// again (for a skip, also if the rows ahead of it finished meanwhile).
func notPending(id int64, action, status string) string {
	row := "queue row " + strconv.FormatInt(id, 10)
	const only = ": only a pending row can be retried or skipped"
	switch status {
	case storage.QueueInflight:
		return row + " is in flight (being delivered)" + only
	case storage.QueueDone, storage.QueueDead:
		return row + " is " + status + " (finished)" + only
	case storage.QueuePending:
		if action == "skip" {
			return row + " was in flight, or behind its lane's head, as the skip ran and is pending at its lane's head now: try again"
		}
		return row + " was in flight and is pending again now: try again"
	default:
		return row + " is in flight or finished" + only
	}
}

// notHead is the error of the 409 to a skip of queue row id, pending but
// not its lane's head (storage.NotHead): head is the row ahead of it, 0 if
// unknown. A skip sets aside only a lane's head, so that a mistyped id
// cannot drop a message queued behind a healthy head.
func notHead(id, head int64) string {
	ahead := "a row of its lane is ahead of it"
	if head != 0 {
		ahead = "row " + strconv.FormatInt(head, 10) + " is ahead of it"
	}
	return "queue row " + strconv.FormatInt(id, 10) + " is pending but is not the head of its lane: " + ahead +
		"; skip acts on a lane's head (deliver or skip the rows ahead first)"
}

// ErrSingleNodeReload is why a config reload is refused for a single node:
// only clustered nodes watch the shared config version, so bumping it would
// report success and change nothing.
var ErrSingleNodeReload = errors.New("single-node (cluster.enabled = false): a single node does not watch the shared config version, so a reload would change nothing; restart mf run to apply the config file")

// ErrNotRunning is what Options.CheckReload returns while this node's
// engine has not started (it waits for its database): its file is not at
// fault, and the same request works once the node runs, so POST
// /config/reload answers it 503 with Retry-After, not 422.
var ErrNotRunning = errors.New("this node is still starting (waiting for its database): try again once it runs")

// notRunningRetryAfter is the Retry-After, in seconds, of a reload refused
// with ErrNotRunning: a node waiting for its database tries it every few
// seconds, and a client told nothing would try again at once.
const notRunningRetryAfter = 5

func (s *Server) configReload(w http.ResponseWriter, r *http.Request) {
	if !s.o.Status().Clustered {
		writeError(w, http.StatusConflict, ErrSingleNodeReload.Error())
		return
	}
	// As mf reload checks its file first: a bump that this node's own
	// file cannot follow would answer 200 and leave the node on its old
	// config, logging an error no caller sees.
	if s.o.CheckReload != nil {
		err := s.o.CheckReload()
		if errors.Is(err, ErrNotRunning) {
			w.Header().Set("Retry-After", strconv.Itoa(notRunningRetryAfter))
			writeError(w, http.StatusServiceUnavailable, "this node cannot check its config file yet, so the shared config version was not bumped (nothing changed on any node): "+err.Error())
			return
		}
		if err != nil {
			writeError(w, http.StatusUnprocessableEntity, "this node's config file cannot be reloaded, so the shared config version was not bumped (nothing changed on any node): "+err.Error())
			return
		}
	}
	ctx, cancel := storeCtx(r, s.limits.storeWrite)
	defer cancel()
	v, err := s.o.Store.ConfigVersionBump(ctx, storage.ConfigVersionBumpParams{})
	if err != nil {
		s.storeWriteFailed(w, "config version bump", err)
		return
	}
	s.o.Log.Info().Int64("config_version", v).Msg("config reload requested through the API")
	writeJSON(w, http.StatusOK, map[string]int64{"config_version": v})
}

func pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	// Digits only: ParseInt takes "+1" too, and one row had two paths.
	if err != nil || id <= 0 || strings.TrimLeft(raw, "0123456789") != "" {
		// Past int64 is a positive integer too: say the bound.
		writeError(w, http.StatusBadRequest, "the id must be a positive integer, at most "+strconv.FormatInt(math.MaxInt64, 10))
		return 0, false
	}
	return id, true
}
