package postgres

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// durability makes each new session's commits durable before mf answers
// AA (session_durability.sql), and says once what it found that it could
// not, or should not have to, set right.
type durability struct {
	log                   zerolog.Logger
	commitOnce, fsyncOnce sync.Once
}

// ensure runs on every new connection (pgx's AfterConnect).
func (d *durability) ensure(ctx context.Context, c *pgconn.PgConn) error {
	res := c.ExecParams(ctx, queries.Get("session_durability"), nil, nil, nil, nil).Read()
	if res.Err != nil {
		return fmt.Errorf("postgres: check the session's durability settings: %w", res.Err)
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) < 2 {
		return fmt.Errorf("postgres: check the session's durability settings: %d rows", len(res.Rows))
	}
	fsyncOn, commitOff := string(res.Rows[0][0]) == "t", string(res.Rows[0][1]) == "t"
	if commitOff {
		d.commitOnce.Do(func() {
			d.log.Warn().Msg("synchronous_commit is off for mf's sessions (set for its role, its database, the server or in the store url): PostgreSQL would acknowledge a commit before it is on disk, and a crash of the database server would lose messages mf had answered AA; " +
				"mf sets it to on for its own sessions (set synchronous_commit to on, or any value but off, for mf's role to silence this)")
		})
	}
	if !fsyncOn {
		d.fsyncOnce.Do(func() {
			d.log.Error().Msg("the PostgreSQL server runs with fsync = off: its commits are not forced to disk, and a crash of its machine can lose messages mf has answered AA, or corrupt the database; no session can change that: set fsync = on in postgresql.conf wherever the messages matter")
		})
	}
	return nil
}
