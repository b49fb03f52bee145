package sqlserver

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// RecordMigration records version as applied without running anything, as a
// newer mf's migration would be: the conformance suite's newer schema
// (storagetest, Migrate/RefusesANewerSchema).
func (s *Store) RecordMigration(ctx context.Context, version int, name string) error {
	_, err := s.db.ExecContext(ctx, queries.Get("migrate_record"), sql.Named("version", int32(version)), sql.Named("name", name))
	return err
}

// ForgetMigration removes version from the applied migrations without
// undoing it, as a schema an older mf migrated looks to a newer one: the
// conformance suite's older schema (storagetest, Migrate/SchemaCheckSaysOlder).
func (s *Store) ForgetMigration(ctx context.Context, version int) error {
	_, err := s.db.ExecContext(ctx, "DELETE FROM mf_schema_migrations WHERE version = @version", sql.Named("version", int32(version)))
	return err
}

// FenceQuery is fence.sql, for a test that holds a fence in a transaction of
// its own, as a fenced write in progress does.
var FenceQuery = queries.Get("fence")

// LaneLockWait is how long a lane's statement waits for a lock
// (laneLockWait).
const LaneLockWait = laneLockWait

// LockTimedOut reports SQL Server's lock timeout, error 1222 (lockTimedOut).
func LockTimedOut(err error) bool { return lockTimedOut(err) }

// LockTimeoutAroundALaneStatement reads @@LOCK_TIMEOUT on one connection:
// during is read in a batch of queue_complete.sql's head, up to its SET
// LOCK_TIMEOUT, sent with a parameter (through sp_executesql, as every lane
// statement is); after, in a batch of its own, once queue_complete.sql
// itself (which completes nothing: no row 0) has run on that connection.
func (s *Store) LockTimeoutAroundALaneStatement(ctx context.Context) (during, after int64, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	text := queries.Get("queue_complete")
	i := strings.Index(text, "SET LOCK_TIMEOUT")
	if i < 0 {
		return 0, 0, fmt.Errorf("queue_complete.sql sets no lock timeout")
	}
	head := text[:i+strings.Index(text[i:], ";")+1]
	if err := conn.QueryRowContext(ctx, head+"\nSELECT CAST(@@LOCK_TIMEOUT AS BIGINT) WHERE @one = 1;", sql.Named("one", 1)).Scan(&during); err != nil {
		return 0, 0, fmt.Errorf("the lock timeout in a lane statement's batch: %w", err)
	}
	var n int64
	if err := conn.QueryRowContext(ctx, text, sql.Named("id", int64(0)), sql.Named("owner", ""), sql.Named("attempt", int64(0))).Scan(&n); err != nil {
		return 0, 0, fmt.Errorf("queue_complete.sql: %w", err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT CAST(@@LOCK_TIMEOUT AS BIGINT)").Scan(&after); err != nil {
		return 0, 0, fmt.Errorf("the lock timeout after a lane statement: %w", err)
	}
	return during, after, nil
}
