package sqlserver

import (
	"context"
	"database/sql"
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
