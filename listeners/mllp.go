package listeners

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/accept"
	"github.com/messagefoundry/mf/internal/tlsfiles"
	"github.com/messagefoundry/mf/storage"
)

// Grace is how long a stopping listener lets its connections finish the
// message in hand (wait for its commit and write its ACK) before closing them.
const Grace = 5 * time.Second

type bind struct{}

// Drain asks an inbound actor to stop taking messages in: it stores and
// answers what it has read, lets go of its port or directory, and responds
// Drained. The graph drains every inbound before it stops the rest, the
// ingest actor among them, which the inbound needs until then. A drained
// inbound stops later like any actor, with nothing left to do.
type Drain struct{}

// Drained is the response to Drain.
type Drained struct{}

// MLLP is the listener actor of one [[inbound]] of type mllp. It binds its
// port in Started and closes it, and every connection, in Stopping: the port
// is open exactly while the graph runs, that is only on the leader, which is
// what makes a load balancer's TCP health check find the primary.
type MLLP struct {
	env *Env
	cfg config.Inbound
	log zerolog.Logger

	ln       net.Listener
	closing  chan struct{} // closed when the listener stops: finish up
	killed   chan struct{} // closed when the grace period is over: give up
	accepted sync.WaitGroup
	conns    *connSet
	retry    scheduler.CancelFunc
	failures int            // attempts to open the port in a row that failed
	binding  storage.Outage // when to log them
	faults   faults         // which connection faults to log
	// cert is the listener's own certificate and key (tls_cert, tls_key)
	// as on disk, nil without TLS: a failed handshake says when the
	// certificate is out of its dates.
	cert *tlsfiles.Pair
	// crls is the inbound's client_crl as on disk, nil without it.
	crls *tlsfiles.CRLs
	// looks asks cert for itself every tlsfiles.IdleLook (lookAtCert), so
	// that a renewal is seen between handshakes.
	looks scheduler.CancelFunc
	// frameStarted, when not nil (tests only), is called by a connection
	// once a frame's start block is read, before the frame's read deadline
	// is set: a test orders a stop there.
	frameStarted func()
}

// lookAtCert has the listener look at its certificate's files.
type lookAtCert struct{}

// NewMLLP returns the props of an MLLP listener actor.
func NewMLLP(env *Env, cfg config.Inbound) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &MLLP{env: env, cfg: cfg, log: env.Log.With().Str("inbound", cfg.Name).Logger()}
	})
}

// Receive implements actor.Actor.
func (l *MLLP) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		l.closing = make(chan struct{})
		l.killed = make(chan struct{})
		l.conns = &connSet{m: map[net.Conn]struct{}{}}
		l.bind(ctx)
	case bind:
		// A retry's timer can fire just as the listener stops (its bind
		// queued behind the Drain), or reach an instance restarted since,
		// which bound at its start: binding then opened a port that no
		// stop closed, and that held it from the next graph.
		if !l.stopping() && l.ln == nil {
			l.bind(ctx)
		}
	case lookAtCert:
		if l.cert != nil {
			l.cert.Certificate() // loads a renewal, logs it and sets its series
		}
		if l.crls != nil {
			l.crls.Look() // loads a CRL fetched again; warns of one out of date
			l.closeRevoked()
		}
	case Drain:
		l.stop()
		ctx.Respond(Drained{})
	case *actor.Stopping, *actor.Restarting:
		l.stop()
	}
}

func (l *MLLP) bind(ctx actor.Context) {
	tlsCfg, cert, crls, err := serverTLS(l.cfg, l.log)
	if err == nil {
		l.ln, err = net.Listen("tcp", l.cfg.Listen)
	}
	if err != nil {
		l.failures++
		now := time.Now()
		l.env.Binds.failed(l.cfg.Name, l.cfg.Listen, now)
		delay := min(time.Duration(l.failures)*time.Second, 30*time.Second)
		// At ERROR when the failures start and once a minute after (the
		// retries go on every 30 s for as long as the port is taken).
		ev := l.log.Debug()
		if log, _ := l.binding.Failed(now); log {
			ev = l.log.Error()
		}
		ev.Err(err).Str("listen", l.cfg.Listen).Dur("retry_in", delay).Int("failures", l.failures).
			Msg("cannot open the MLLP listener; retrying (is the port taken, or a certificate file unreadable?)" + ephemeralHint(l.cfg.Listen, err))
		l.retry = scheduler.NewTimerScheduler(ctx).SendOnce(delay, ctx.Self(), bind{})
		return
	}
	failed := l.failures
	l.failures = 0
	l.binding.Over()
	l.env.Binds.bound(l.cfg.Name)
	if tlsCfg != nil {
		l.ln = tls.NewListener(l.ln, tlsCfg)
		l.cert, l.crls = cert, crls
		if crls != nil {
			crls.Report()
		}
		l.looks = scheduler.NewTimerScheduler(ctx).SendRepeatedly(tlsfiles.IdleLook, tlsfiles.IdleLook, ctx.Self(), lookAtCert{})
	}
	l.log.Info().Str("listen", l.ln.Addr().String()).Bool("tls", tlsCfg != nil).Int("failed_attempts", failed).Msg("MLLP listener open")
	l.accepted.Add(1)
	go l.acceptLoop()
}

func (l *MLLP) acceptLoop() {
	defer l.accepted.Done()
	refused, lastRefusalLog := 0, time.Time{}
	// Out of file descriptors, the guard closes the connections waiting
	// (counted as refused) and logs once a minute; the loop never sees it.
	ln := accept.NewGuard(l.ln, l.log.With().Str("listen", l.cfg.Listen).Logger(), "the MLLP listener",
		func() { countRefusedConn(l.cfg.Name) })
	defer ln.Release() // the listener itself is closed by stop
	// An accept that fails is tried again every 50 ms: logged each time,
	// that was 72,000 lines an hour.
	var failing storage.Outage
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-l.closing:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if log, n := failing.Failed(time.Now()); log {
				l.log.Error().Err(err).Str("listen", l.cfg.Listen).Int("failures", n).
					Msg("accepting MLLP connections fails: senders cannot connect; retrying every 50 ms, logged once a minute while it lasts (check the process's limits and the system's (dmesg))")
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if n := failing.Over(); n > 0 {
			l.log.Info().Str("listen", l.cfg.Listen).Int("failures", n).Msg("accepting connections again")
		}
		switch l.conns.add(c, l.cfg.MaxConnections) {
		case connAdded:
		case connStopping:
			// The port stays open while a clean stop answers the messages
			// in hand (stop): a connection that comes now is not served.
			c.Close()
			continue
		case connFull:
			c.Close()
			countRefusedConn(l.cfg.Name)
			refused++
			if time.Since(lastRefusalLog) > 10*time.Second { // once per interval, not per connection
				l.log.Warn().Int("refused", refused).Int("max_connections", l.cfg.MaxConnections).
					Msg("connections refused: the listener is at max_connections")
				refused, lastRefusalLog = 0, time.Now()
			}
			continue
		}
		go func() {
			defer l.conns.remove(c)
			(&conn{l: l, c: c}).serve()
		}()
	}
}

// stop ends the listener, and returns only when every connection goroutine
// has ended and the port is closed. Connections read no further message;
// each finishes the one in hand (waits for its commit and writes its ACK)
// for up to Grace, then all are closed.
//
// On a clean stop (SIGTERM, a reload) the port closes only after that: a
// load balancer that checks the port and cuts the sessions of a node whose
// check fails (HAProxy's on-marked-down shutdown-sessions, as README
// advises) would otherwise cut a connection between its message's commit
// and its ACK, and the sender would send that message again to the next
// primary, which delivers it a second time. The node still holds the lease
// until the graph has stopped, so the port open a little longer delays no
// one. On a loss of leadership (the term's context is cancelled) the port
// closes first: the messages in hand fail against the fence anyway, and
// the load balancer must move at once.
func (l *MLLP) stop() {
	if l.stopping() {
		return // drained already
	}
	if l.retry != nil {
		l.retry()
	}
	if l.looks != nil {
		l.looks()
	}
	if l.crls != nil {
		l.crls.Retire()
	}
	close(l.closing)
	termEnded := l.env.Ctx.Done()
	if l.env.Ctx.Err() != nil {
		l.closePort()
		termEnded = nil
	}
	l.conns.stop()
	ended, grace := l.conns.ended(), time.NewTimer(Grace)
	defer grace.Stop()
	finished := false
wait:
	for {
		select {
		case <-ended:
			finished = true
			break wait
		case <-termEnded:
			// The term ended during the clean stop: as on any loss.
			l.closePort()
			termEnded = nil
		case <-grace.C:
			break wait
		}
	}
	l.closePort()
	if !finished {
		l.log.Warn().Str("listen", l.cfg.Listen).Dur("grace", Grace).
			Msg("connections still had a message in hand when the stop's grace ran out; closing them (their senders get no ACK and send again)")
		close(l.killed)
		l.conns.closeAll()
		l.conns.wait(time.Minute)
	}
}

// closePort closes the listening socket and waits for the accept loop to
// end; once done, a second call does nothing.
func (l *MLLP) closePort() {
	if l.ln != nil {
		l.ln.Close()
		l.accepted.Wait()
		l.ln = nil
		l.log.Info().Str("listen", l.cfg.Listen).Msg("MLLP listener closed")
	}
	l.env.Binds.stopped(l.cfg.Name)
}

// stopping reports whether the listener has begun to stop.
func (l *MLLP) stopping() bool {
	select {
	case <-l.closing:
		return true
	default:
		return false
	}
}

// connSet tracks a listener's open connections.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
	// chains holds the verified chains of each connection's client
	// certificate once its handshake succeeded (mutual TLS only), for
	// closeRevoked.
	chains   map[net.Conn][][]*x509.Certificate
	wg       sync.WaitGroup
	stopping bool // no connection is added once the listener stops
}

// addResult is what connSet.add did with a connection.
type addResult int

const (
	connAdded    addResult = iota
	connFull               // at max_connections
	connStopping           // the listener is stopping
)

func (s *connSet) add(c net.Conn, limit int) addResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopping:
		return connStopping
	case len(s.m) >= limit:
		return connFull
	}
	s.m[c] = struct{}{}
	s.wg.Add(1)
	return connAdded
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	delete(s.chains, c)
	s.mu.Unlock()
	c.Close()
	s.wg.Done()
}

// verified records the chains of c's client certificate, verified by its
// handshake.
func (s *connSet) verified(c net.Conn, chains [][]*x509.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, open := s.m[c]; !open {
		return
	}
	if s.chains == nil {
		s.chains = map[net.Conn][][]*x509.Certificate{}
	}
	s.chains[c] = chains
}

// closed forgets the chains of c, closed for them: a later look must not
// close and log it again before its goroutine has ended.
func (s *connSet) closed(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.chains, c)
}

// verifiedChains returns the connections whose client certificate was
// verified, with its chains.
func (s *connSet) verifiedChains() map[net.Conn][][]*x509.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[net.Conn][][]*x509.Certificate, len(s.chains))
	for c, ch := range s.chains {
		out[c] = ch
	}
	return out
}

// closeRevoked closes each open connection whose client certificate (or a
// CA of its chain) a CRL of client_crl now revokes: MLLP connections stand
// for days, and the handshake that admitted one checked the lists of then.
// Called at each look (tlsfiles.IdleLook), it closes a connection within
// seconds of the listener loading the list that revokes it. A message in
// hand when it closes is not acknowledged; its sender, if it may still
// send, sends it again.
func (l *MLLP) closeRevoked() {
	for c, chains := range l.conns.verifiedChains() {
		r := l.crls.Revoked(chains)
		if r == nil {
			continue
		}
		l.log.Warn().Str("remote", c.RemoteAddr().String()).
			Str("client_cn", r.Cert.Subject.CommonName).Str("client_serial", r.Cert.SerialNumber.String()).
			Str("client_issuer", r.Cert.Issuer.CommonName).Time("revoked_at", r.RevokedAt).Str("client_crl", r.CRL.Path).
			Msg("closed a connection whose client certificate a CRL loaded since revokes; its reconnections are refused at the handshake. If this partner should still send here, it needs a new certificate from its CA; if not (a device lost, a partner offboarded), it must stop connecting")
		l.conns.closed(c)
		c.Close()
	}
}

// stop adds no connection from now on, and makes every blocked read return
// now; a connection waiting for its commit is not reading and still writes
// its ACK.
func (s *connSet) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	for c := range s.m {
		c.SetReadDeadline(time.Now())
	}
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		c.Close()
	}
}

// ended returns a channel closed once every connection has ended. Call it
// only after stop, when no connection can be added any more.
func (s *connSet) ended() <-chan struct{} {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	return done
}

func (s *connSet) wait(d time.Duration) bool {
	select {
	case <-s.ended():
		return true
	case <-time.After(d):
		return false
	}
}

// serverTLS builds the listener's TLS config: none without a certificate;
// mutual TLS when client_ca is set, refusing the clients a CRL of
// client_crl revokes and admitting only the tls_client_names when they are
// listed. Each handshake takes the certificate, the CAs of client_ca and
// the CRLs, as the files are then (tlsfiles): a renewal, or a CRL fetched
// again, needs no reload. cert is the listener's certificate and key, crls
// its client_crl (nil without).
func serverTLS(c config.Inbound, log zerolog.Logger) (cfg *tls.Config, cert *tlsfiles.Pair, crls *tlsfiles.CRLs, err error) {
	if c.TLSCert == "" {
		return nil, nil, nil, nil
	}
	ep := tlsfiles.Endpoint{Kind: "inbound", Name: c.Name}
	cert, err = tlsfiles.LoadPair(ep, c.TLSCert, c.TLSKey, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("inbound %s: load tls_cert/tls_key: %w", c.Name, err)
	}
	cfg = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Certificate(), nil },
	}
	if c.ClientCA != "" {
		cas, err := tlsfiles.LoadPool(ep, "client_ca", c.ClientCA, log)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("inbound %s: read client_ca: %w", c.Name, err)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		// VerifyConnection runs on a resumed session too (VerifyPeerCertificate
		// does not): a certificate revoked after its session began is
		// refused when it comes back with its ticket.
		var checks []func(tls.ConnectionState) error
		if len(c.ClientCRL) > 0 {
			crls, err = tlsfiles.LoadCRLs(ep, c.ClientCA, c.ClientCRL, log)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("inbound %s: read client_crl: %w", c.Name, err)
			}
			checks = append(checks, admitUnrevoked(crls))
		}
		if len(c.TLSClientNames) > 0 {
			checks = append(checks, admitListed(c.TLSClientNames))
		}
		if len(checks) > 0 {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				for _, check := range checks {
					if err := check(cs); err != nil {
						return err
					}
				}
				return nil
			}
		}
		// The CAs go in a config of the handshake's own (ClientCAs has no
		// callback); the session ticket keys stay cfg's.
		base := cfg.Clone()
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			hs := base.Clone()
			hs.ClientCAs = cas.CertPool()
			return hs, nil
		}
	}
	return cfg, cert, crls, nil
}
