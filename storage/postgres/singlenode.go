package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage"
)

// ErrSingleNodeTaken is HoldSingleNode's error when another process runs as
// the single node of the store's schema: storage.ErrSingleNodeTaken, the
// same for every dialect.
var ErrSingleNodeTaken = storage.ErrSingleNodeTaken

// singleNode is the session that holds a single node's lock
// (single_node_lock.sql) and its watch.
type singleNode struct {
	// lost is set once another process holds the lock this one had lost
	// (its session dropped): the store refuses every write with the zero
	// fence from then on (refuseLost).
	lost atomic.Bool
	stop context.CancelFunc
	done sync.WaitGroup
}

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
// node (cluster disabled) of the store's schema, and holds it on a session
// of its own until Close: ErrSingleNodeTaken, naming the holder, if another
// process holds it past singleNodeStartWait. A single node writes with the
// zero fence, which every process passes, and two of them both led: the
// second's promotion recovery gave back the rows the first was sending,
// which were sent again behind newer ones. The session is looked at every
// singleNodeCheck; dropped (a restart of the database, the network), the
// lock is taken again on a new one. Only a holder found and known to be
// another session's (not this node's previous one) means another process
// took it: the store then refuses every single-node write, and the
// returned channel says why (the node must stop: the other runs). A lock
// held by a session that could not be read, or that ended before it was,
// is tried again: stopping for it stopped nodes that held their own lock.
// A stop (ctx) during the start's wait returns ctx's error.
func (s *Store) HoldSingleNode(ctx context.Context) (<-chan error, error) {
	conn, own, err := s.takeSingleNode(ctx, lockSession{})
	for deadline := time.Now().Add(singleNodeStartWait); err != nil && busy(err) && time.Now().Before(deadline); {
		s.log.Warn().Err(err).Dur("gives_up_in", time.Until(deadline).Round(time.Second)).Msg("waiting for this schema's single-node lock")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(singleNodeCheck):
		}
		conn, own, err = s.takeSingleNode(ctx, lockSession{})
	}
	if errors.Is(err, errLockUnclear) {
		return nil, fmt.Errorf("%w (%v): stop it first, or, to run several nodes on one database, enable [cluster] on each", ErrSingleNodeTaken, err)
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

// lockSession is a backend as the server knows it: its pid and its start,
// which no other backend shares, a later one given the same pid included.
type lockSession struct {
	pid   int32
	start time.Time
}

// errLockUnclear is takeSingleNode's error for a lock held by a session it
// could not name: one that ended before it was read, or a read that failed.
var errLockUnclear = errors.New("the single-node lock is held by a session that could not be read, or that has since ended")

// busy says whether err is a lock another session holds, named or not.
func busy(err error) bool {
	return errors.Is(err, ErrSingleNodeTaken) || errors.Is(err, errLockUnclear)
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
		return nil, lockSession{}, errLockUnclear
	case err != nil:
		return nil, lockSession{}, fmt.Errorf("%w: %v", errLockUnclear, explain(err))
	case previous.pid != 0 && holder.pid == previous.pid && holder.start.Equal(previous.start):
		s.log.Warn().Int32("backend_pid", holder.pid).Msg("this single node's previous lock session still holds its lock (the server has not seen it dropped): ending it and taking the lock again")
		if _, err := conn.Exec(ctx, queries.Get("single_node_end_own"), holder.pid, holder.start); err != nil {
			return nil, lockSession{}, fmt.Errorf("%w: ending this node's previous session: %v", errLockUnclear, explain(err))
		}
		// The backend ends a moment after the call returns.
		for range 20 {
			if took, own, err = take(); err == nil && took {
				kept = true
				return conn, own, nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		return nil, lockSession{}, fmt.Errorf("%w: this node's previous session, ended, still held it a second later", errLockUnclear)
	}
	return nil, lockSession{}, fmt.Errorf("%w (it holds its lock: backend pid %d, application_name %q, from %s): stop it first, or, to run several nodes on one database, enable [cluster] on each",
		ErrSingleNodeTaken, holder.pid, app, addr)
}

// watchSingleNode looks at the lock's session every singleNodeCheck and
// takes the lock again on a new one when it drops, until ctx ends; if a
// session known to be another's holds it by then, it sets lost, says so on
// lost and returns. own is the session that holds it now.
func (s *Store) watchSingleNode(ctx context.Context, conn *pgx.Conn, own lockSession, lost chan<- error) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
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
			err := conn.Ping(pctx)
			cancel()
			if err == nil || ctx.Err() != nil {
				continue
			}
			s.log.Warn().Err(err).Msg("the session holding this single node's lock dropped (the database restarted, or the network); taking the lock again on a new one")
			conn.Close(context.Background())
			conn = nil
		}
		tctx, cancel := context.WithTimeout(ctx, singleNodeCheck)
		c, taken, err := s.takeSingleNode(tctx, own)
		cancel()
		switch {
		case err == nil:
			conn, own = c, taken
			s.log.Info().Msg("this single node holds its lock again")
		case errors.Is(err, ErrSingleNodeTaken):
			s.single.lost.Store(true)
			s.log.Error().Err(err).Msg("another mf took this single node's lock while its session was down: this node writes nothing more and stops")
			lost <- err
			return
		default:
			// The database not reachable yet (its writes fail meanwhile),
			// or the holder not known: tried again.
			s.log.Debug().Err(err).Msg("taking this single node's lock again failed; trying again")
		}
	}
}

// refuseLost refuses a write with the zero fence once another process holds
// the single node's lock (HoldSingleNode).
func (s *Store) refuseLost(owner string, term int64) error {
	if term == 0 && owner == "" && s.single.lost.Load() {
		return fmt.Errorf("postgres: write refused: %w (it took the lock while this node's session was down)", ErrSingleNodeTaken)
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
