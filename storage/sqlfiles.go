package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Queries holds a dialect's named SQL statements, read from its embedded .sql
// files: the file name without ".sql" is the statement's name.
type Queries map[string]string

// LoadQueries reads every .sql file of dir in fsys. It is meant to run at
// package init of a dialect, so a missing file fails the build's tests at once.
func LoadQueries(fsys fs.FS, dir string) (Queries, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("storage: read embedded queries %s: %w", dir, err)
	}
	q := Queries{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("storage: read embedded query %s: %w", e.Name(), err)
		}
		q[strings.TrimSuffix(e.Name(), ".sql")] = string(b)
	}
	return q, nil
}

// MustLoadQueries is LoadQueries for package-level variables.
func MustLoadQueries(fsys fs.FS, dir string) Queries {
	q, err := LoadQueries(fsys, dir)
	if err != nil {
		panic(err)
	}
	return q
}

// Get returns the named statement and panics if it does not exist: a
// misspelt name is a programming error the conformance suite catches.
func (q Queries) Get(name string) string {
	s, ok := q[name]
	if !ok {
		panic("storage: no embedded query named " + name)
	}
	return s
}

// Migration is one embedded schema migration, NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads dir's NNNN_name.sql files in version order.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("storage: read embedded migrations %s: %w", dir, err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("storage: migration %s: name must be NNNN_description.sql", name)
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("storage: read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("storage: two migrations with version %d", out[i].Version)
		}
	}
	return out, nil
}

// ErrSchemaNewer is the error of a Migrate that finds a migration applied
// to the database that this build does not have: a newer mf migrated it.
var ErrSchemaNewer = errors.New("the database's schema is newer than this mf")

// CheckApplied returns ErrSchemaNewer, naming the versions, if applied (the
// versions the database has recorded) holds one that known (this build's
// migrations) does not. An older mf on a newer schema would write with
// statements written for the old one (a rolled-back upgrade, or a node
// left on the old version in a rolling one): a column it does not fill, a
// status it does not know. Refusing at start is the safe side.
func CheckApplied(known []Migration, applied map[int]bool) error {
	have := make(map[int]bool, len(known))
	newest := 0
	for _, m := range known {
		have[m.Version] = true
		newest = max(newest, m.Version)
	}
	var unknown []int
	for v := range applied {
		if !have[v] {
			unknown = append(unknown, v)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Ints(unknown)
	return fmt.Errorf("%w: it has migration %v applied, which this mf (migrations 1 to %d) does not have; a newer mf migrated it: run that version of mf, or a later one, on every node",
		ErrSchemaNewer, unknown, newest)
}

// ErrSchemaOlder is the error of a SchemaCheck that finds a migration of
// this build not applied to the database: a newer mf (this one) on a
// schema only an older mf has migrated, mf migrate not run yet.
var ErrSchemaOlder = errors.New("the database's schema is older than this mf")

// CheckSchema is CheckApplied, then ErrSchemaOlder, naming the versions, if
// a migration of known is not in applied. A command of a newer mf that reads
// columns its migrations add (mf reload's wait reads mf_nodes) says to run
// mf migrate, rather than fail on a missing column.
func CheckSchema(known []Migration, applied map[int]bool) error {
	if err := CheckApplied(known, applied); err != nil {
		return err
	}
	var pending []int
	for _, m := range known {
		if !applied[m.Version] {
			pending = append(pending, m.Version)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	return &SchemaOlderError{Pending: pending}
}

// SchemaOlderError is CheckSchema's ErrSchemaOlder: Pending lists, in
// order, this build's migrations the database does not have.
type SchemaOlderError struct{ Pending []int }

func (e *SchemaOlderError) Error() string {
	return fmt.Sprintf("%v: migration %v of this mf is not applied to it; run mf migrate (nodes of the older mf go on working on the migrated schema)",
		ErrSchemaOlder, e.Pending)
}

// Is makes a SchemaOlderError an ErrSchemaOlder.
func (e *SchemaOlderError) Is(target error) bool { return target == ErrSchemaOlder }

// PendingMigrations reads a SchemaCheck's answer: the migrations to apply,
// and whether that is known (false for any other error: a new database
// whose migrations table is not there yet, say).
func PendingMigrations(schemaCheck error) (pending []int, known bool) {
	var e *SchemaOlderError
	switch {
	case schemaCheck == nil:
		return nil, true
	case errors.As(schemaCheck, &e):
		return e.Pending, true
	}
	return nil, false
}

// Seconds converts a duration to the fractional seconds the SQL files take.
func Seconds(d time.Duration) float64 { return d.Seconds() }

// DefaultPurgeLimit bounds the rows one MessagePurge call deletes, so that a
// long-idle sweeper does not hold one huge transaction.
const DefaultPurgeLimit = 10000

// SQLQuerier is what AppliedMigrations reads with: a *sql.DB or a *sql.Tx.
type SQLQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// AppliedMigrations reads the versions a dialect on database/sql (SQLite,
// SQL Server) recorded as applied, with its query, one version a row.
func AppliedMigrations(ctx context.Context, q SQLQuerier, query string) (map[int]bool, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read applied migrations: %w", err)
		}
		done[int(v)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return done, nil
}

// LaneKeys reads the lane_key recorded for each destination
// (Store.QueueLaneKeys) by a dialect on database/sql (SQLite, SQL Server),
// with its query, one (destination, lane_key) a row.
func LaneKeys(ctx context.Context, q SQLQuerier, query string) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var dest, key string
		if err := rows.Scan(&dest, &key); err != nil {
			return nil, err
		}
		out[dest] = key
	}
	return out, rows.Err()
}

// DeadRows reads the dead rows a resend-dead may resend
// (Store.QueueResendDead) for a dialect on database/sql (SQLite, SQL
// Server), with its pick query and args, one (id, message_id, lane,
// inbound, payload) a row.
func DeadRows(ctx context.Context, q SQLQuerier, query string, args ...any) ([]DeadRow, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var dead []DeadRow
	for rows.Next() {
		var d DeadRow
		if err := rows.Scan(&d.ID, &d.MessageID, &d.Lane, &d.Inbound, &d.Payload); err != nil {
			return nil, err
		}
		dead = append(dead, d)
	}
	return dead, rows.Err()
}

// SQLRowQuerier is what QueueRefusals reads one row with: a *sql.DB or a
// *sql.Tx.
type SQLRowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// QueueRefusals says why a write of one queue row matched nothing, for a
// dialect on database/sql (SQLite, SQL Server). Status is the dialect's
// look at the row's status (queue_status.sql), SkipRefused its look at the
// row's status and the head of its lane ahead of it, if any
// (queue_skip_refused.sql); ID is how the dialect passes the row's id to
// them. Each runs in the write's transaction, after the write.
type QueueRefusals struct {
	Status, SkipRefused string
	ID                  func(id int64) any
}

// MissingOr says why an update of queue row id matched nothing: the row
// does not exist (ErrNotFound), or it is not in the state the update needs
// (otherwise).
func (r QueueRefusals) MissingOr(ctx context.Context, q SQLRowQuerier, id int64, otherwise error) error {
	if _, err := r.status(ctx, q, id); err != nil {
		return err
	}
	return otherwise
}

// NotPending says why an operator action on queue row id matched nothing:
// the row does not exist (ErrNotFound), or it is not pending (a NotPending
// with the status it has).
func (r QueueRefusals) NotPending(ctx context.Context, q SQLRowQuerier, id int64) error {
	status, err := r.status(ctx, q, id)
	if err != nil {
		return err
	}
	return NotPending{ID: id, Status: status}
}

// NotSkipped says why an operator's skip of queue row id changed nothing:
// the row does not exist (ErrNotFound), or as SkipRefused tells from what
// the look found.
func (r QueueRefusals) NotSkipped(ctx context.Context, q SQLRowQuerier, id int64) error {
	var status string
	var head sql.NullInt64
	err := q.QueryRowContext(ctx, r.SkipRefused, r.ID(id)).Scan(&status, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return SkipRefused(id, status, head.Int64, head.Valid)
}

// status returns the status of queue row id, or ErrNotFound.
func (r QueueRefusals) status(ctx context.Context, q SQLRowQuerier, id int64) (string, error) {
	var status string
	err := q.QueryRowContext(ctx, r.Status, r.ID(id)).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotFound
	}
	return status, err
}
