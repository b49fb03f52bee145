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
	// lost is set once a session known to be another's holds the lock this
	// node had lost: every write with the zero fence is refused
	// (RefuseLost).
	lost atomic.Bool
	stop context.CancelFunc
	done sync.WaitGroup
}

// Hold takes the lock with take, and holds it until Close: it waits up to
// startWait for a lock another session holds (a restart that overlaps the
// old process), then refuses with ErrSingleNodeTaken. The session is pinged
// every check; dropped (a restart of the database, the network), the lock
// is taken again on a new one. Only a holder known to be another's means
// another process took it: the writes are then refused and the returned
// channel says why (the node must stop: the other runs). A holder not
// named is tried again: stopping for it stopped nodes that held their own
// lock. A stop (ctx) during the start's wait returns ctx's error.
func (n *SingleNode) Hold(ctx context.Context, check, startWait time.Duration, take TakeLock) (<-chan error, error) {
	busy := func(err error) bool { return errors.Is(err, ErrSingleNodeTaken) || errors.Is(err, ErrLockUnclear) }
	session, err := take(ctx, nil)
	for deadline := time.Now().Add(startWait); err != nil && busy(err) && time.Now().Before(deadline); {
		n.Log.Warn().Err(err).Dur("gives_up_in", time.Until(deadline).Round(time.Second)).Msg("waiting for this schema's single-node lock")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(check):
		}
		session, err = take(ctx, nil)
	}
	if errors.Is(err, ErrLockUnclear) {
		return nil, fmt.Errorf("%w (%v): stop it first, or, to run several nodes on one database, enable [cluster] on each", ErrSingleNodeTaken, err)
	}
	if err != nil {
		return nil, err
	}
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
			pctx, cancel := context.WithTimeout(ctx, check)
			err := own.Ping(pctx)
			cancel()
			if err == nil || ctx.Err() != nil {
				continue
			}
			n.Log.Warn().Err(err).Msg("the session holding this single node's lock dropped (the database restarted, or the network); taking the lock again on a new one")
			own.Close()
			held = false
		}
		tctx, cancel := context.WithTimeout(ctx, check)
		c, err := take(tctx, own)
		cancel()
		switch {
		case err == nil:
			own, held = c, true
			n.Log.Info().Msg("this single node holds its lock again")
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

// RefuseLost refuses a write with the zero fence once another process holds
// the lock (Hold).
func (n *SingleNode) RefuseLost(owner string, term int64) error {
	if term == 0 && owner == "" && n.lost.Load() {
		return fmt.Errorf("%s: write refused: %w (it took the lock while this node's session was down)", n.Dialect, ErrSingleNodeTaken)
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
