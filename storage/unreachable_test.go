package storage_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/messagefoundry/mf/storage"
)

// sqlState is an error with a SQLSTATE, as pgconn.PgError is.
type sqlState string

func (s sqlState) Error() string    { return "server error " + string(s) }
func (s sqlState) SQLState() string { return string(s) }

// pgbouncerError is an error with a SQLSTATE and PgBouncer's words, as
// pgconn.PgError is of PgBouncer's refusals: it answers them all 08P01.
type pgbouncerError string

func (e pgbouncerError) Error() string    { return "FATAL: " + string(e) + " (SQLSTATE 08P01)" }
func (e pgbouncerError) SQLState() string { return "08P01" }

// sqlNumber is an error with a SQL Server error number, as mssql.Error is.
type sqlNumber int32

func (n sqlNumber) Error() string         { return fmt.Sprintf("mssql: error %d", int32(n)) }
func (n sqlNumber) SQLErrorNumber() int32 { return int32(n) }

// What mf run waits out at start (the way to the database) and what it
// exits on (this node's own settings, which waiting does not mend).
func TestUnreachableTellsTheWayFromTheSettings(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("failed to connect to `user=mf`: %w", err) }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{"reset as the session started", wrap(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{"closed as the session started", wrap(io.ErrUnexpectedEOF), true},
		{"a name server not answering", wrap(&net.DNSError{Name: "db", IsTemporary: true}), true},
		{"starting up (57P03)", wrap(sqlState("57P03")), true},
		{"too many connections (53300)", wrap(sqlState("53300")), true},
		{"connection failure (08006)", wrap(sqlState("08006")), true},
		{"SQL Server in script upgrade mode (18401)", wrap(sqlNumber(18401)), true},
		{"Azure SQL database not available (40613)", wrap(sqlNumber(40613)), true},
		// go-mssqldb v1.11 reports a read that failed during login as text
		// (fmt.Errorf("login error: %s", err)): the *net.OpError is gone.
		{"SQL Server closing the session during login", wrap(fmt.Errorf("login error: %s", &net.OpError{Op: "Read", Err: io.EOF})), true},
		{"SQL Server resetting the session during login", wrap(fmt.Errorf("login error: %s", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})), true},

		{"PgBouncer unable to reach the server (08P01)", wrap(pgbouncerError("pgbouncer cannot connect to server")), true},

		// PgBouncer refuses a login with 08P01, a connection exception,
		// where PostgreSQL says 28P01: a node behind it with a wrong
		// password waited at start for ever, "cannot reach the database".
		{"a wrong password, said by PgBouncer (08P01)", wrap(pgbouncerError("password authentication failed")), false},
		{"a user PgBouncer does not know (08P01)", wrap(pgbouncerError("no such user: mf")), false},
		{"a database PgBouncer does not know (08P01)", wrap(pgbouncerError("no such database: mf")), false},
		{"a startup parameter PgBouncer refuses (08P01)", wrap(pgbouncerError("unsupported startup parameter: search_path")), false},
		// PgBouncer in statement mode ends a connection that begins a
		// transaction, with 08P01: mf run's sessions check (OwnSessions)
		// must refuse the pooler, not wait for ever for a database there.
		{"a transaction refused by PgBouncer in statement mode (08P01)", fmt.Errorf("postgres: check the sessions: %w", pgbouncerError("transaction blocks not allowed in statement pooling mode")), false},
		{"a name that does not exist", wrap(&net.DNSError{Name: "db.example", IsNotFound: true}), false},
		{"a TLS handshake refused", wrap(&net.OpError{Op: "remote error", Err: tls.AlertError(40)}), false},
		{"a wrong password (28P01)", wrap(sqlState("28P01")), false},
		{"a database that does not exist (3D000)", wrap(sqlState("3D000")), false},
		{"SQL Server login failed (18456)", wrap(sqlNumber(18456)), false},
		{"another SQL Server login error as text", wrap(errors.New("login error: Feature with ID '4' is already present in FeatureExt block")), false},
		{"anything else", errors.New("postgres: parse store url: bad"), false},
		{"nil", nil, false},
	} {
		if got := storage.Unreachable(c.err); got != c.want {
			t.Errorf("%s: Unreachable = %v, want %v", c.name, got, c.want)
		}
	}
}
