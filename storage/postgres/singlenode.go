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
// process holds it. A single node writes with the zero fence, which every
// process passes, and two of them both led: the second's promotion recovery
// gave back the rows the first was sending, which were sent again behind
// newer ones. The session is looked at every singleNodeCheck; dropped (a
// restart of the database), the lock is taken again on a new one. If
// another process took it meanwhile, the store refuses every single-node
// write from then on, and the returned channel says why: the node must
// stop (the other runs).
func (s *Store) HoldSingleNode(ctx context.Context) (<-chan error, error) {
	conn, err := s.takeSingleNode(ctx, 0)
	for deadline := time.Now().Add(singleNodeStartWait); errors.Is(err, ErrSingleNodeTaken) && time.Now().Before(deadline); {
		s.log.Warn().Err(err).Dur("gives_up_in", time.Until(deadline).Round(time.Second)).Msg("waiting for this schema's single-node lock")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(singleNodeCheck):
		}
		conn, err = s.takeSingleNode(ctx, 0)
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
		s.watchSingleNode(wctx, conn, lost)
	}()
	return lost, nil
}

// takeSingleNode connects a session of its own and takes the lock on it.
// previous is the backend pid of this node's last lock session (0: none):
// found holding the lock, it is this node's own, dropped on the client's
// side (a network gone a moment) and not yet on the server's: it is ended
// (pg_terminate_backend, which a role may do to its own sessions) and the
// lock taken again, rather than the node stop for a lock it holds.
func (s *Store) takeSingleNode(ctx context.Context, previous uint32) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("postgres: connect the single node's lock session: %w", explain(err))
	}
	names, values := make([]string, 0, len(lockKeepalive)), make([]string, 0, len(lockKeepalive))
	for name, v := range lockKeepalive {
		if _, set := conn.Config().RuntimeParams[name]; !set {
			names, values = append(names, name), append(values, v)
		}
	}
	if err := setSession(ctx, conn.PgConn(), names, values); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	var took bool
	if err := conn.QueryRow(ctx, queries.Get("single_node_lock")).Scan(&took); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("postgres: take the single node's lock: %w", explain(err))
	}
	if took {
		return conn, nil
	}
	holder := "a session that has since ended"
	var pid int32
	var app, addr string
	if err := conn.QueryRow(ctx, queries.Get("single_node_holder")).Scan(&pid, &app, &addr); err == nil {
		holder = fmt.Sprintf("backend pid %d, application_name %q, from %s", pid, app, addr)
		if previous != 0 && uint32(pid) == previous {
			s.log.Warn().Int32("backend_pid", pid).Msg("this single node's previous lock session still holds its lock (the server has not seen it dropped): ending it and taking the lock again")
			_, err := conn.Exec(ctx, queries.Get("single_node_end_own"), pid)
			// The backend ends a moment after the call returns.
			for i := 0; err == nil && i < 20; i++ {
				if err = conn.QueryRow(ctx, queries.Get("single_node_lock")).Scan(&took); err == nil && took {
					return conn, nil
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	conn.Close(context.Background())
	return nil, fmt.Errorf("%w (it holds its lock: %s): stop it first, or, to run several nodes on one database, enable [cluster] on each", ErrSingleNodeTaken, holder)
}

// watchSingleNode looks at the lock's session every singleNodeCheck and
// takes the lock again on a new one when it drops, until ctx ends; if
// another process holds it by then, it sets lost, says so on lost and
// returns.
func (s *Store) watchSingleNode(ctx context.Context, conn *pgx.Conn, lost chan<- error) {
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	previous := conn.PgConn().PID() // this node's own, should the server still show it
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
		c, err := s.takeSingleNode(tctx, previous)
		cancel()
		switch {
		case err == nil:
			conn, previous = c, c.PgConn().PID()
			s.log.Info().Msg("this single node holds its lock again")
		case errors.Is(err, ErrSingleNodeTaken):
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
