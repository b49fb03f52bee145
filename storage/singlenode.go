package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// ErrLockUnclear is a dialect's error for a single node's lock held by a
// session it could not name: one that ended before it was read, or a read
// that failed. It may be the node's own: SingleNode's watch tries again
// rather than stop; at start, past the wait, it refuses.
var ErrLockUnclear = errors.New("the single-node lock is held by a session that could not be read, or that has since ended")

// ErrLockDown refuses a single node's write with the zero fence while the
// node does not know that it holds its lock: the session that held it has
// dropped (a failed ping) and the lock is not yet taken again on a new one,
// or no ping has answered within the trust window (SingleNode.Hold).
// Another process may hold the lock meanwhile. The write is to be made
// again: an ingest answers AE, a lane tries again, and both work once the
// node holds its lock again.
var ErrLockDown = errors.New("the session holding this single node's lock is down or not answering, and the lock is not held again yet")

// LockSession is a dialect's database session that holds a single node's
// lock; the dialect knows it again (its own previous session) by what it
// keeps beside.
type LockSession interface {
	// Ping fails once the session has dropped.
	Ping(ctx context.Context) error
	// Close ends the session, and the lock with it.
	Close()
}

// TakeLock connects a session and takes a single node's lock on it.
// previous is the node's last lock session (nil: none), which, found still
// holding the lock on the server, the dialect may end or wait out. It
// returns ErrSingleNodeTaken only for a holder known to be another's,
// ErrLockUnclear (wrapped) for one it could not tell.
type TakeLock func(ctx context.Context, previous LockSession) (LockSession, error)

// SingleNode is the lock that lets one process run as the single node
// (cluster disabled) of a database store's schema, as SQLite's file lock
// does for its file, and its watch. A single node writes with the zero
// fence, which every process passes, and two of them both led: the
// second's promotion recovery gave back the rows the first was sending,
// which were sent again behind newer ones.
type SingleNode struct {
	// Dialect names the store in the errors of refused writes.
	Dialect string
	Log     zerolog.Logger
	// holding is set once Hold has taken the lock: from then on a write
	// with the zero fence is let through only while trustedUntil has not
	// passed and lost is not set (RefuseUnheld). Before (a store that no
	// single node holds: a clustered node's, a test's), nothing is refused.
	holding atomic.Bool
	// base is the monotonic origin of trustedUntil, set before holding.
	base time.Time
	// trustedUntil (nanoseconds since base) is when the lock stops being
	// known held: the start of the last ping that answered, or of the take
	// that took the lock, plus the trust window; zero from a failed ping
	// until the lock is taken again.
	trustedUntil atomic.Int64
	// window is the trust window, set with base.
	window time.Duration
	// lost is set once a session known to be another's holds the lock this
	// node had lost: every write with the zero fence is refused for good.
	lost atomic.Bool
	stop context.CancelFunc
	done sync.WaitGroup
}

// Hold takes the lock with take, and holds it until Close: it waits up to
// startWait for a lock another session holds (a restart that overlaps the
// old process), then refuses with ErrSingleNodeTaken. The session is pinged
// every check; dropped (a restart of the database, the network), the lock
// is taken again on a new one. Only a holder known to be another's means
// another process took it: the writes are then refused for good and the
// returned channel says why (the node must stop: the other runs). A holder
// not named is tried again: stopping for it stopped nodes that held their
// own lock. A stop (ctx) during the start's wait returns ctx's error.
//
// While the node does not know that it holds the lock, its writes with the
// zero fence are refused (ErrLockDown, RefuseUnheld), not only once another
// holder is named: from the ping that fails until the lock is taken again
// on a new session, and whenever no ping has answered within the trust
// window, 2 × check from the start of the last one that did. Another
// process may take the lock the moment the session drops and run its
// promotion recovery, which gives back the rows this node is sending; the
// node's claims and stores went on meanwhile, for as long as it could not
// name the holder (for ever on SQL Server without VIEW SERVER STATE). The
// window is the ping's own: the next ping starts check after the last and
// is given check to answer, so a session that answers is never refused,
// and one whose ping hangs past its timeout (a driver that does not heed
// it) is refused when a failed one would have been. It is well under the
// time a server takes to drop the session of a client gone silent
// (PostgreSQL's lock session asks for about 11 s): a node cut off from its
// database refuses before another can take its lock.
//
// What remains open is the time the node takes to learn of a drop it did
// not cause: the server may end the session while the node is well (an
// administrator's kill, a restart of the database, a pooler), and the node
// learns it at its next ping, up to check later; its writes go on until
// then. Writes already past the check when it learns (it is looked at when
// a write starts, and the pool's sessions are not the lock's) commit or not
// as they would have, possibly after another process took the lock and
// recovered. That reorders no lane: a claim takes only its lane's head and
// then holds the lane under its lease until it is recorded or expires (the
// row may be sent twice: at least once), a record of a row re-pended finds
// its claim lost, and a message stored is the other's to deliver. What can
// reorder a lane is a delivery this node claimed before the other's
// recovery: its send is no write, and may land after the other's send of
// the same row and of newer ones. Once the node names the other holder
// (lost), its engine abandons the deliveries in hand at once, as on a
// demotion (actors.Options.LockLost); one it cannot name leaves them to end
// as they would.
func (n *SingleNode) Hold(ctx context.Context, check, startWait time.Duration, take TakeLock) (<-chan error, error) {
	busy := func(err error) bool { return errors.Is(err, ErrSingleNodeTaken) || errors.Is(err, ErrLockUnclear) }
	took := time.Now()
	session, err := take(ctx, nil)
	for deadline := time.Now().Add(startWait); err != nil && busy(err) && time.Now().Before(deadline); {
		n.Log.Warn().Err(err).Dur("gives_up_in", time.Until(deadline).Round(time.Second)).Msg("waiting for this schema's single-node lock")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(check):
		}
		took = time.Now()
		session, err = take(ctx, nil)
	}
	if errors.Is(err, ErrLockUnclear) {
		return nil, fmt.Errorf("%w (%v): stop it first, or, to run several nodes on one database, enable [cluster] on each", ErrSingleNodeTaken, err)
	}
	if err != nil {
		return nil, err
	}
	// Trusted from the start of the take that worked, not of the wait
	// before it (a restart that overlapped the old process).
	n.base, n.window = took, 2*check
	n.trust(took)
	if time.Since(took) >= check {
		// A take slow to connect (TLS, DNS, a loaded server) spent much of
		// the window: without a ping now, the node refused its writes the
		// moment it started, until the watch's first ping.
		_ = n.pingAndTrust(ctx, session, check)
	}
	n.holding.Store(true)
	lost := make(chan error, 1)
	wctx, stop := context.WithCancel(context.Background())
	n.stop = stop
	n.done.Add(1)
	go func() {
		defer n.done.Done()
		n.watch(wctx, check, session, take, lost)
	}()
	return lost, nil
}

// watch pings the lock's session every check and takes the lock again on a
// new one when it drops, until ctx ends; if a session known to be another's
// holds it by then, it sets lost, says so on lost and returns. own is the
// session that holds it, or held it last.
func (n *SingleNode) watch(ctx context.Context, check time.Duration, own LockSession, take TakeLock, lost chan<- error) {
	held := true
	defer func() {
		if held {
			own.Close()
		}
	}()
	t := time.NewTicker(check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if held {
			err := n.pingAndTrust(ctx, own, check)
			if err == nil || ctx.Err() != nil {
				continue
			}
			// Refused before anything else: another process may take the
			// lock from now on.
			n.trustedUntil.Store(0)
			n.Log.Warn().Err(err).Msg("the session holding this single node's lock dropped (the database restarted, or the network); its writes are refused until it takes the lock again on a new one")
			own.Close()
			held = false
		}
		tctx, cancel := context.WithTimeout(ctx, check)
		took := time.Now()
		c, err := take(tctx, own)
		cancel()
		switch {
		case err == nil:
			own, held = c, true
			n.trust(took)
			n.Log.Info().Msg("this single node holds its lock again; its writes are let through")
		case errors.Is(err, ErrSingleNodeTaken):
			n.lost.Store(true)
			n.Log.Error().Err(err).Msg("another mf took this single node's lock while its session was down: this node writes nothing more and stops")
			lost <- err
			return
		default:
			// The database not reachable yet (its writes fail meanwhile),
			// or the holder not known: tried again.
			n.Log.Debug().Err(err).Msg("taking this single node's lock again failed; trying again")
		}
	}
}

// pingAndTrust pings session, given timeout to answer, and trusts the lock
// from the ping's start if it answered.
func (n *SingleNode) pingAndTrust(ctx context.Context, session LockSession, timeout time.Duration) error {
	pinged := time.Now()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := session.Ping(pctx)
	if err == nil && ctx.Err() == nil {
		n.trust(pinged)
	}
	return err
}

// trust records that the lock was known held at from (the start of the ping
// that answered, or of the take that took it): writes are let through until
// the trust window has passed from then.
func (n *SingleNode) trust(from time.Time) {
	n.trustedUntil.Store(int64(from.Sub(n.base) + n.window))
}

// RefuseUnheld refuses a write with the zero fence of a single node that
// does not know it holds its lock (Hold): ErrSingleNodeTaken once another
// process is known to hold it, ErrLockDown while its session is down or
// has not answered within the trust window. Other fences, and a store no
// single node holds, are let through.
func (n *SingleNode) RefuseUnheld(owner string, term int64) error {
	if term != 0 || owner != "" || !n.holding.Load() {
		return nil
	}
	if n.lost.Load() {
		return fmt.Errorf("%s: write refused: %w (it took the lock while this node's session was down)", n.Dialect, ErrSingleNodeTaken)
	}
	if time.Since(n.base) >= time.Duration(n.trustedUntil.Load()) {
		return fmt.Errorf("%s: write refused: %w (another process may take it meanwhile)", n.Dialect, ErrLockDown)
	}
	return nil
}

// Close ends the watch and lets the lock go with its session.
func (n *SingleNode) Close() {
	if n.stop != nil {
		n.stop()
		n.done.Wait()
	}
}
