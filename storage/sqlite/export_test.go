package sqlite

import (
	"context"
	"time"
)

// RecordMigration records version as applied without running anything, as a
// newer mf's migration would be: the conformance suite's newer schema
// (storagetest, Migrate/RefusesANewerSchema).
func (s *Store) RecordMigration(ctx context.Context, version int, name string) error {
	_, err := s.db.ExecContext(ctx, queries.Get("migrate_record"), version, name)
	return err
}

// ForgetMigration removes version from the applied migrations without
// undoing it, as a schema an older mf migrated looks to a newer one: the
// conformance suite's older schema (storagetest, Migrate/SchemaCheckSaysOlder).
func (s *Store) ForgetMigration(ctx context.Context, version int) error {
	_, err := s.db.ExecContext(ctx, "DELETE FROM mf_schema_migrations WHERE version = ?1", version)
	return err
}

// stubFreeSpace makes the store see free as the file system's free space
// for the rest of t.
func stubFreeSpace(t interface{ Cleanup(func()) }, free func(dir string) (uint64, bool)) {
	old := freeSpace
	freeSpace = free
	t.Cleanup(func() { freeSpace = old })
}

// shortenCloseGrace makes Close wait only grace past the busy timeout for
// the rest of t.
func shortenCloseGrace(t interface{ Cleanup(func()) }, grace time.Duration) {
	old := closeGrace
	closeGrace = grace
	t.Cleanup(func() { closeGrace = old })
}
