package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrSharedSessions is OwnSessions' error: the connections of the store url
// do not each have a PostgreSQL session of their own.
var ErrSharedSessions = errors.New("the store url leads to a connection pooler that shares PostgreSQL sessions between connections (PgBouncer's pool_mode = transaction or statement): " +
	"mf needs a session of its own on each connection, for the settings that make its commits durable before it answers AA (synchronous_commit) and let a frozen primary's locks go (idle_in_transaction_session_timeout), " +
	"for LISTEN and for its prepared statements; set pool_mode = session for mf's database in the pooler, or connect mf to PostgreSQL directly")

// OwnSessions returns ErrSharedSessions when the store url leads to a
// pooler in transaction or statement mode, which runs each transaction of
// a connection on whichever server session is free: a session setting
// made once connected (synchronous_commit = on among them) would hold
// for one transaction in many, and LISTEN and prepared statements break.
// It asks two connections of its own which server process serves them,
// one of them inside a transaction: with sessions of their own they never
// share one, and a connection's process never changes; a pooler that
// lends the first connection's process to the second's transaction, or
// serves the first's next statement from another, shares them. An idle
// pooler does one or the other, since it lends the process it was just
// given back. Statement mode refuses the transaction outright.
func (s *Store) OwnSessions(ctx context.Context) error {
	cfg := s.pool.Config().ConnConfig
	a, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return fmt.Errorf("postgres: connect to check the sessions: %w", explain(err))
	}
	defer a.Close(context.WithoutCancel(ctx))
	b, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return fmt.Errorf("postgres: connect to check the sessions: %w", explain(err))
	}
	defer b.Close(context.WithoutCancel(ctx))
	// The simple protocol: a pooler in transaction mode breaks prepared
	// statements, and this must tell what it is, not fail on that.
	pid := func(c *pgx.Conn) (int32, error) {
		var p int32
		err := c.QueryRow(ctx, queries.Get("backend_pid"), pgx.QueryExecModeSimpleProtocol).Scan(&p)
		return p, err
	}
	first, err := pid(a)
	if err != nil {
		return fmt.Errorf("postgres: check the sessions: %w", err)
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: check the sessions: %w: %w", ErrSharedSessions, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	var other int32
	if err := tx.QueryRow(ctx, queries.Get("backend_pid"), pgx.QueryExecModeSimpleProtocol).Scan(&other); err != nil {
		return fmt.Errorf("postgres: check the sessions: %w", err)
	}
	again, err := pid(a)
	if err != nil {
		return fmt.Errorf("postgres: check the sessions: %w", err)
	}
	if other == first || again != first {
		return ErrSharedSessions
	}
	return nil
}
