package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage"
)

// ErrSingleNodeTaken is HoldSingleNode's error when another process runs as
// the single node of the store's schema: storage.ErrSingleNodeTaken, the
// same for every dialect.
var ErrSingleNodeTaken = storage.ErrSingleNodeTaken

// singleNodeCheck is how often the lock's session is looked at, and how
// often a lost one is taken again.
const singleNodeCheck = 2 * time.Second

// singleNodeStartWait is how long HoldSingleNode waits for a lock another
// session holds before it gives up: the session of a process that has just
// stopped, or of a host that died (dropped by the keepalive its lock
// session sets, lockKeepalive, within about 11 s), ends in that time, and a
// restart of the node then starts rather than fail.
var singleNodeStartWait = 30 * time.Second

// lockKeepalive are the lock session's settings: its server drops it
// within about 11 s of its client's host going silent (a crash, a power
// cut, a network gone), rather than the system's two hours, for which the
// node could not have started again.
var lockKeepalive = map[string]string{"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3", "tcp_user_timeout": "11000"}

// HoldSingleNode takes the lock that lets this process run as the single
// node (cluster disabled) of the store's schema, a session advisory lock
// held on a session of its own until Close (storage.SingleNode.Hold says
// how it is waited for, watched and lost).
func (s *Store) HoldSingleNode(ctx context.Context) (<-chan error, error) {
	return s.single.Hold(ctx, singleNodeCheck, singleNodeStartWait, s.takeLock)
}

// takeLock is HoldSingleNode's storage.TakeLock: takeSingleNode, on a
// pgLock.
func (s *Store) takeLock(ctx context.Context, previous storage.LockSession) (storage.LockSession, error) {
	var prev lockSession
	if p, ok := previous.(*pgLock); ok {
		prev = p.id
	}
	conn, own, err := s.takeSingleNode(ctx, prev)
	if err != nil {
		return nil, err
	}
	return &pgLock{conn: conn, id: own}, nil
}

// pgLock is the session that holds a single node's lock, and its backend.
type pgLock struct {
	conn *pgx.Conn
	id   lockSession
}

// Ping implements storage.LockSession.
func (l *pgLock) Ping(ctx context.Context) error { return l.conn.Ping(ctx) }

// Close implements storage.LockSession.
func (l *pgLock) Close() { l.conn.Close(context.Background()) }

// lockSession is a backend as the server knows it: its pid and its start,
// which no other backend shares, a later one given the same pid included.
type lockSession struct {
	pid   int32
	start time.Time
}

// takeSingleNode connects a session of its own, takes the lock on it and
// returns it with the session as the server knows it. previous is this
// node's last lock session (zero: none): found holding the lock, it is this
// node's own, dropped on the node's side (a network gone a moment) and not
// yet on the server's; it is ended (single_node_end_own.sql) and the lock
// taken again, rather than the node stop for a lock it holds.
// ErrSingleNodeTaken only for a holder read and not previous.
func (s *Store) takeSingleNode(ctx context.Context, previous lockSession) (*pgx.Conn, lockSession, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, lockSession{}, fmt.Errorf("postgres: connect the single node's lock session: %w", explain(err))
	}
	names, values := make([]string, 0, len(lockKeepalive)), make([]string, 0, len(lockKeepalive))
	for name, v := range lockKeepalive {
		if _, set := conn.Config().RuntimeParams[name]; !set {
			names, values = append(names, name), append(values, v)
		}
	}
	if err := setSession(ctx, conn.PgConn(), names, values); err != nil {
		conn.Close(context.Background())
		return nil, lockSession{}, err
	}
	take := func() (bool, lockSession, error) {
		var took bool
		var own lockSession
		err := conn.QueryRow(ctx, queries.Get("single_node_lock")).Scan(&took, &own.pid, &own.start)
		return took, own, err
	}
	took, own, err := take()
	if err != nil {
		conn.Close(context.Background())
		return nil, lockSession{}, fmt.Errorf("postgres: take the single node's lock: %w", explain(err))
	}
	if took {
		return conn, own, nil
	}
	kept := false // the session goes back taken, or is closed
	defer func() {
		if !kept {
			conn.Close(context.Background())
		}
	}()
	var holder lockSession
	var app, addr string
	switch err := conn.QueryRow(ctx, queries.Get("single_node_holder")).Scan(&holder.pid, &holder.start, &app, &addr); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, lockSession{}, fmt.Errorf("%w", storage.ErrLockUnclear)
	case err != nil:
		return nil, lockSession{}, fmt.Errorf("%w: %v", storage.ErrLockUnclear, explain(err))
	case previous.pid != 0 && holder.pid == previous.pid && holder.start.Equal(previous.start):
		s.log.Warn().Int32("backend_pid", holder.pid).Msg("this single node's previous lock session still holds its lock (the server has not seen it dropped): ending it and taking the lock again")
		if _, err := conn.Exec(ctx, queries.Get("single_node_end_own"), holder.pid, holder.start); err != nil {
			return nil, lockSession{}, fmt.Errorf("%w: ending this node's previous session: %v", storage.ErrLockUnclear, explain(err))
		}
		// The backend ends a moment after the call returns.
		for range 20 {
			if took, own, err = take(); err == nil && took {
				kept = true
				return conn, own, nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil, lockSession{}, fmt.Errorf("%w: this node's previous session, ended, still held it a second later", storage.ErrLockUnclear)
	}
	return nil, lockSession{}, fmt.Errorf("%w (it holds its lock: backend pid %d, application_name %q, from %s): stop it first, or, to run several nodes on one database, enable [cluster] on each",
		ErrSingleNodeTaken, holder.pid, app, addr)
}
