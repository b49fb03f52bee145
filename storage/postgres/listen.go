package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/storage"
)

var _ storage.ResignWatcher = (*Store)(nil)

// listenRetry is the pause before the watcher reconnects after an error.
const listenRetry = time.Second

// WatchResignations implements storage.ResignWatcher. It LISTENs on its own
// connection, outside the pool, so that waiting never takes a connection
// the engine needs.
func (s *Store) WatchResignations(ctx context.Context, notify func(), onError func(error)) {
	for ctx.Err() == nil {
		err := s.listen(ctx, notify)
		if ctx.Err() != nil {
			return
		}
		onError(err)
		select {
		case <-time.After(listenRetry):
		case <-ctx.Done():
		}
	}
}

func (s *Store) listen(ctx context.Context, notify func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("postgres: connect to listen for resignations: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var schema string
	if err := conn.QueryRow(ctx, queries.Get("current_schema")).Scan(&schema); err != nil {
		return fmt.Errorf("postgres: read current schema: %w", err)
	}
	if _, err := conn.Exec(ctx, queries.Get("listen_resigned")); err != nil {
		return fmt.Errorf("postgres: listen for resignations: %w", err)
	}
	// A resignation between two connections would be missed; the caller's
	// regular election attempts cover that gap.
	notify()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("postgres: wait for resignations: %w", err)
		}
		if n.Payload == schema {
			notify()
		}
	}
}
