package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// singleNode is the session that holds a single node's lock
// (single_node_lock.sql) and its watch.
type singleNode struct {
	// db opens the lock's session, apart from the pool: a connection of its
	// own for the life of the hold, closed (not kept idle) when let go.
	db *sql.DB
	// lost is set once another process holds the lock this one had lost
	// (its session dropped): the store refuses every write with the zero
	// fence from then on (refuseLost).
	lost atomic.Bool
	stop context.CancelFunc
	done sync.WaitGroup
}

// singleNodeCheck is how often the lock's session is looked at, and how
// often a lost one is taken again (a variable for a test).
var singleNodeCheck = 2 * time.Second

// session tells a server session from any later one given its id.
type session struct {
	id    int32
	login time.Time
}

// errOwnSession is takeSingleNode's when the lock is still held by this
// process's own earlier session, which the server has not yet seen end (the
// network dropped it): no other process can hold the lock meanwhile.
var errOwnSession = errors.New("the lock is still held by this node's previous session")

// errLockUnclear is takeSingleNode's error for a lock held by a session it
// could not name: one that ended before it was read, or a read of
// sys.dm_tran_locks that failed (it needs VIEW SERVER STATE). The watch
// tries again rather than stop: stopping for it stopped nodes that held
// their own lock. At start, after singleNodeStartWait, it refuses.
var errLockUnclear = errors.New("the single-node lock is held by a session that could not be read (sys.dm_tran_locks needs VIEW SERVER STATE), or that has since ended")

// singleNodeStartWait is how long HoldSingleNode waits for a lock another
// session holds before it gives up: that of a process that has just
// stopped (a restart that overlaps it) ends in that time.
var singleNodeStartWait = 30 * time.Second

// HoldSingleNode takes the lock that lets this process run as the single
// node (cluster disabled) of the store's schema, and holds it on a session
// of its own until Close: ErrSingleNodeTaken, naming the holder, if another
// process holds it. A single node writes with the zero fence, which every
// process passes, and two of them both led: the second's promotion recovery
// gave back the rows the first was sending, which were sent again behind
// newer ones. The session is looked at every singleNodeCheck; dropped (a
// restart of the database), the lock is taken again on a new one. If
// another process took it meanwhile, the store refuses every single-node
// write from then on, and the returned channel says why: the node must
// stop (the other runs).
//
// The lock is sp_getapplock's, owned by the session, on a name of the
// login's default schema (application locks are per database).
func (s *Store) HoldSingleNode(ctx context.Context) (<-chan error, error) {
	conn, own, err := s.takeSingleNode(ctx, session{})
	for deadline := time.Now().Add(singleNodeStartWait); err != nil && (errors.Is(err, storage.ErrSingleNodeTaken) || errors.Is(err, errLockUnclear)) && time.Now().Before(deadline); {
		s.log.Warn().Err(err).Dur("gives_up_in", time.Until(deadline).Round(time.Second)).Msg("waiting for this schema's single-node lock")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(singleNodeCheck):
		}
		conn, own, err = s.takeSingleNode(ctx, session{})
	}
	if errors.Is(err, errLockUnclear) {
		return nil, fmt.Errorf("%w (%v): stop it first, or, to run several nodes on one database, enable [cluster] on each", storage.ErrSingleNodeTaken, err)
	}
	if err != nil {
		return nil, err
	}
	lost := make(chan error, 1)
	wctx, stop := context.WithCancel(context.Background())
	s.single.stop = stop
	s.single.done.Add(1)
	go func() {
		defer s.single.done.Done()
		s.watchSingleNode(wctx, conn, own, lost)
	}()
	return lost, nil
}

// takeSingleNode takes the lock on a session of its own: the session and
// its identity. ErrSingleNodeTaken, naming the holder, if another session
// holds it; errOwnSession if the holder is previous, this node's own
// earlier session.
func (s *Store) takeSingleNode(ctx context.Context, previous session) (*sql.Conn, session, error) {
	conn, err := s.single.db.Conn(ctx)
	if err != nil {
		return nil, session{}, fmt.Errorf("sqlserver: connect the single node's lock session: %w", err)
	}
	var result int
	var own session
	if err := conn.QueryRowContext(ctx, queries.Get("single_node_lock")).Scan(&result, &own.id, &own.login); err != nil {
		conn.Close()
		return nil, session{}, fmt.Errorf("sqlserver: take the single node's lock: %w", err)
	}
	if result >= 0 {
		return conn, own, nil
	}
	defer conn.Close()
	if result != -1 {
		return nil, session{}, fmt.Errorf("sqlserver: take the single node's lock: sp_getapplock returned %d", result)
	}
	var holder session
	var program, host string
	err = conn.QueryRowContext(ctx, queries.Get("single_node_holder")).Scan(&holder.id, &holder.login, &program, &host)
	switch {
	case err == nil && previous.id != 0 && holder.id == previous.id && holder.login.Equal(previous.login):
		return nil, session{}, errOwnSession
	case errors.Is(err, sql.ErrNoRows):
		return nil, session{}, errLockUnclear
	case err != nil:
		return nil, session{}, fmt.Errorf("%w: %v", errLockUnclear, err)
	}
	who := fmt.Sprintf("session %d, program_name %q, host_name %q", holder.id, program, host)
	return nil, session{}, fmt.Errorf("%w (it holds its lock: %s): stop it first, or, to run several nodes on one database, enable [cluster] on each", storage.ErrSingleNodeTaken, who)
}

// watchSingleNode looks at the lock's session every singleNodeCheck and
// takes the lock again on a new one when it drops, until ctx ends; if
// another process holds it by then, it sets lost, says so on lost and
// returns. While the dropped session itself still holds the lock (the
// server has not seen it end), no other process can: it tries again.
func (s *Store) watchSingleNode(ctx context.Context, conn *sql.Conn, own session, lost chan<- error) {
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	t := time.NewTicker(singleNodeCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn != nil {
			pctx, cancel := context.WithTimeout(ctx, singleNodeCheck)
			err := conn.PingContext(pctx)
			cancel()
			if err == nil || ctx.Err() != nil {
				continue
			}
			s.log.Warn().Err(err).Msg("the session holding this single node's lock dropped (the database restarted, or the network); taking the lock again on a new one")
			// Closed, not kept idle (SetMaxIdleConns(0)): the session
			// ends, and with it the lock, once the server sees it.
			conn.Close()
			conn = nil
		}
		tctx, cancel := context.WithTimeout(ctx, singleNodeCheck)
		c, taken, err := s.takeSingleNode(tctx, own)
		cancel()
		switch {
		case err == nil:
			conn, own = c, taken
			s.log.Info().Msg("this single node holds its lock again")
		case errors.Is(err, errOwnSession):
			s.log.Warn().Int32("session", own.id).Msg("this single node's previous session still holds its lock (the server has not seen it end); taking it again in a moment")
		case errors.Is(err, storage.ErrSingleNodeTaken):
			s.single.lost.Store(true)
			s.log.Error().Err(err).Msg("another mf took this single node's lock while its session was down: this node writes nothing more and stops")
			lost <- err
			return
		}
		// Not reachable yet: its writes fail meanwhile; tried again.
	}
}

// refuseLost refuses a write with the zero fence once another process holds
// the single node's lock (HoldSingleNode).
func (s *Store) refuseLost(owner string, term int64) error {
	if term == 0 && owner == "" && s.single.lost.Load() {
		return fmt.Errorf("sqlserver: write refused: %w (it took the lock while this node's session was down)", storage.ErrSingleNodeTaken)
	}
	return nil
}

// closeSingleNode ends the watch and lets the lock go with its session.
func (s *Store) closeSingleNode() {
	if s.single.stop != nil {
		s.single.stop()
		s.single.done.Wait()
	}
}
