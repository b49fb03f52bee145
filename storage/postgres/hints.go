package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// hints say what to do about the errors of the database's state or of mf's
// role, which PostgreSQL's own words leave an operator to work out, by
// SQLSTATE. Each names what to change; the node retries meanwhile (a lane,
// an election, a renewal, the ingest with AE).
var hints = map[string]string{
	// read_only_sql_transaction: a hot standby (the old primary after a
	// managed failover), or default_transaction_read_only set.
	"25006": "the database is read-only " + readOnlyAdvice,
	// insufficient_privilege
	"42501": "mf's role lacks a privilege: GRANT it USAGE on the schema, SELECT, INSERT, UPDATE, DELETE on mf's tables and USAGE on their sequences (applying migrations needs the schema's owner: mf migrate)",
	// too_many_connections: the server's max_connections, or a role's or
	// database's CONNECTION LIMIT.
	"53300": "the database takes no more sessions (its max_connections, or the CONNECTION LIMIT of mf's role or database): each node opens up to [store] pool_size + 2 (the lease's and the resignation listener's); lower pool_size or raise the limit",
	// invalid_sql_statement_name, duplicate_prepared_statement: the
	// prepared statements of one connection met on another's session.
	"26000": sharedSessionsHint,
	"42P05": sharedSessionsHint,
	// query_canceled: mf sets no statement_timeout of its own (its calls'
	// deadlines end them through the client, and are told as such), so it
	// is one in the store url, or an operator's cancel.
	"57014": "the database cancelled the statement: by a statement_timeout that [store] url sets (mf's store calls have deadlines of their own: remove it from the url), or by an operator (pg_cancel_backend)",
	// invalid_password, invalid_authorization_specification
	"28P01": "the database refused mf's login: check [store] url's user and MF_STORE_PASSWORD",
	"28000": "the database refused mf's login: check [store] url's user, that the role exists and may log in (LOGIN), and pg_hba.conf",
}

// readOnlyAdvice follows "the database is read-only" (Ping's
// storage.ErrReadOnly says that much itself).
const readOnlyAdvice = "(a standby, or default_transaction_read_only set, as a managed service does when its disk is nearly full): point [store] url at the primary (a url naming every host with target_session_attrs=read-write finds it), or make the database writable"

const sharedSessionsHint = "a connection pooler in transaction or statement mode stands between mf and PostgreSQL: set pool_mode = session for mf's database in it (mf run refuses such a pooler at start, if it can tell)"

// explain adds to err what to do about it, when its SQLSTATE has a hint.
func explain(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	if h, ok := hints[pgErr.Code]; ok {
		return fmt.Errorf("%w: %s", err, h)
	}
	return err
}

// readOnly reports a write refused because the database is read-only.
func readOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}

// sessionsPerNode is what a clustered node opens besides its pool: the
// lease's session and the resignation listener's. A single node opens one:
// its lock's (HoldSingleNode).
const sessionsPerNode = 2

// SessionLimits says which limit on sessions (a CONNECTION LIMIT of mf's
// role or database, or the server's max_connections) is below what this
// node opens, pool_size (+ 2 on a clustered node, + 1 on a single one), or "" for none. Above it, the pool's new
// sessions are refused under load (SQLSTATE 53300): messages answered AE,
// lanes retrying. Each node opens as many, which one node cannot count.
func (s *Store) SessionLimits(ctx context.Context) (string, error) {
	var role, db, server int
	var roleName, dbName string
	if err := s.pool.QueryRow(ctx, queries.Get("session_limits")).Scan(&role, &db, &roleName, &dbName, &server); err != nil {
		return "", fmt.Errorf("postgres: read the limits on sessions: %w", err)
	}
	pool := int(s.pool.Config().MaxConns)
	need, opens := pool, fmt.Sprintf("pool_size %d", pool)
	if s.clustered {
		need += sessionsPerNode
		opens += ", the lease's and the resignation listener's"
	} else {
		need++
		opens += ", and its single-node lock's"
	}
	var below []string
	if role >= 0 && role < need {
		below = append(below, fmt.Sprintf("the CONNECTION LIMIT %d of role %s", role, roleName))
	}
	if db >= 0 && db < need {
		below = append(below, fmt.Sprintf("the CONNECTION LIMIT %d of database %s", db, dbName))
	}
	if server < need {
		below = append(below, fmt.Sprintf("the server's max_connections, %d for this role", server))
	}
	if len(below) == 0 {
		return "", nil
	}
	return fmt.Sprintf("%s is below the %d sessions this node opens (%s)", strings.Join(below, " and "), need, opens), nil
}

// NoWritableHost reports a connection that the store url's
// target_session_attrs (read-write, primary) turned down because every
// host it names is read-only or a standby: a database failing over, whose
// new primary is not promoted yet. Waiting mends it, as it does a database
// that does not answer.
func NoWritableHost(err error) bool {
	return errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, pgconn.ErrStandbyConnection)
}
