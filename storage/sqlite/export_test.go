package sqlite

import "context"

// RecordMigration records version as applied without running anything, as a
// newer mf's migration would be: the conformance suite's newer schema
// (storagetest, Migrate/RefusesANewerSchema).
func (s *Store) RecordMigration(ctx context.Context, version int, name string) error {
	_, err := s.db.ExecContext(ctx, queries.Get("migrate_record"), version, name)
	return err
}
