package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// singleNode is a single node's lock (storage.SingleNode) and the pool its
// session comes from.
type singleNode struct {
	storage.SingleNode
	// db opens the lock's session, apart from the pool: a connection of its
	// own for the life of the hold, closed (not kept idle) when let go.
	db *sql.DB
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
// network dropped it): no other process can hold the lock meanwhile, and
// the watch tries again (it is storage.ErrLockUnclear).
var errOwnSession = fmt.Errorf("%w: it is this node's previous session", storage.ErrLockUnclear)

// viewServerState is what a holder that could not be read may lack.
const viewServerState = "sys.dm_tran_locks needs VIEW SERVER STATE"

// singleNodeStartWait is how long HoldSingleNode waits for a lock another
// session holds before it gives up: that of a process that has just
// stopped (a restart that overlaps it) ends in that time.
var singleNodeStartWait = 30 * time.Second

// HoldSingleNode takes the lock that lets this process run as the single
// node (cluster disabled) of the store's schema, sp_getapplock's, owned by
// a session of its own, on a name of the login's default schema
// (application locks are per database), held until Close
// (storage.SingleNode.Hold says how it is waited for, watched and lost).
func (s *Store) HoldSingleNode(ctx context.Context) (<-chan error, error) {
	return s.single.Hold(ctx, singleNodeCheck, singleNodeStartWait, s.takeLock)
}

// takeLock is HoldSingleNode's storage.TakeLock: takeSingleNode, on an
// msLock.
func (s *Store) takeLock(ctx context.Context, previous storage.LockSession) (storage.LockSession, error) {
	var prev session
	if p, ok := previous.(*msLock); ok {
		prev = p.id
	}
	conn, own, err := s.takeSingleNode(ctx, prev)
	if err != nil {
		return nil, err
	}
	return &msLock{conn: conn, id: own}, nil
}

// msLock is the session that holds a single node's lock, and its identity.
type msLock struct {
	conn *sql.Conn
	id   session
}

// Ping implements storage.LockSession.
func (l *msLock) Ping(ctx context.Context) error { return l.conn.PingContext(ctx) }

// Close implements storage.LockSession: closed, not kept idle
// (SetMaxIdleConns(0)), the session ends, and with it the lock, once the
// server sees it.
func (l *msLock) Close() { l.conn.Close() }

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
		s.log.Warn().Int32("session", holder.id).Msg("this single node's previous session still holds its lock (the server has not seen it end); taking it again in a moment")
		return nil, session{}, errOwnSession
	case errors.Is(err, sql.ErrNoRows):
		return nil, session{}, fmt.Errorf("%w (%s)", storage.ErrLockUnclear, viewServerState)
	case err != nil:
		return nil, session{}, fmt.Errorf("%w (%s): %v", storage.ErrLockUnclear, viewServerState, err)
	}
	who := fmt.Sprintf("session %d, program_name %q, host_name %q", holder.id, program, host)
	return nil, session{}, fmt.Errorf("%w (it holds its lock: %s): stop it first, or, to run several nodes on one database, enable [cluster] on each", storage.ErrSingleNodeTaken, who)
}
