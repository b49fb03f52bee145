package postgres

import (
	"context"
	"time"
)

// RecordMigration records version as applied without running anything, as a
// newer mf's migration would be: the conformance suite's newer schema
// (storagetest, Migrate/RefusesANewerSchema).
func (s *Store) RecordMigration(ctx context.Context, version int, name string) error {
	_, err := s.pool.Exec(ctx, queries.Get("migrate_record"), version, name)
	return err
}

// ForgetMigration removes version from the applied migrations without
// undoing it, as a schema an older mf migrated looks to a newer one: the
// conformance suite's older schema (storagetest, Migrate/SchemaCheckSaysOlder).
func (s *Store) ForgetMigration(ctx context.Context, version int) error {
	_, err := s.pool.Exec(ctx, "DELETE FROM mf_schema_migrations WHERE version = $1", version)
	return err
}

// SetSingleNodeStartWait sets how long HoldSingleNode waits for a lock
// another session holds, until the test ends.
func SetSingleNodeStartWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := singleNodeStartWait
	singleNodeStartWait = d
	t.Cleanup(func() { singleNodeStartWait = old })
}
