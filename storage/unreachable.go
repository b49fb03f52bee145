package storage

import (
	"errors"
	"io"
	"net"
	"strings"
)

// Unreachable reports whether err says that the database could not be
// reached, or not yet served a session: a failure of the way to it, which
// passes once the network or the server is back, as opposed to one of this
// node's settings (a refused login, a database that does not exist, a
// certificate not trusted), which waiting does not mend. `mf run` waits
// out the first kind at start and exits on the second.
//
// It needs no driver: PostgreSQL's errors carry their SQLSTATE
// (SQLState), SQL Server's their number (SQLErrorNumber).
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) {
		// dial: refused, no route, timed out; read and write: the server
		// closed or reset the session as it started. Not "remote error"
		// or "local error", crypto/tls's for a handshake refused, which
		// is a certificate or a TLS setting.
		switch op.Op {
		case "dial", "read", "write":
			return true
		}
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTemporary || dns.IsTimeout // not a name that does not exist
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true // the server closed the session as it started
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		code := pg.SQLState()
		// 08: connection exception; 57P03: the server is starting up or
		// shutting down; 53300: too many connections; 57P01/57P02: the
		// session was ended by a shutdown or a crash of another backend.
		if code == "08P01" && pgbouncerRefusal(err.Error()) {
			return false
		}
		return strings.HasPrefix(code, "08") || code == "57P03" || code == "53300" || code == "57P01" || code == "57P02"
	}
	if loginReadFailed(err) {
		return true
	}
	var ms interface{ SQLErrorNumber() int32 }
	if errors.As(err, &ms) {
		switch ms.SQLErrorNumber() {
		// 18401: the server is in script upgrade mode (it has just
		// started); 40613, 40197, 40501: the database is not available,
		// being reconfigured, or busy (Azure SQL's transient errors).
		case 18401, 40613, 40197, 40501:
			return true
		}
	}
	return false
}

// pgbouncerRefusals are PgBouncer's words for refusing a login of this
// node's settings, which it answers with SQLSTATE 08P01 (a protocol
// violation, class 08 "connection exception"), as it does the failures of
// its own way to the server, which waiting mends ("pgbouncer cannot
// connect to server").
var pgbouncerRefusals = []string{
	"password authentication failed",
	"SASL authentication failed",
	"no such user",
	"no such database",
	"unsupported startup parameter",
	// pool_mode = statement ends a connection that begins a transaction:
	// a pooler mf cannot run behind (postgres.OwnSessions says so).
	"transaction blocks not allowed",
}

func pgbouncerRefusal(text string) bool {
	for _, r := range pgbouncerRefusals {
		if strings.Contains(text, r) {
			return true
		}
	}
	return false
}

// loginReadFailed reports a read that failed while SQL Server answered the
// login: go-mssqldb (v1.11) returns it as text, fmt.Errorf("login error:
// %s", err), so the *net.OpError that a read failure is (its Op "read", or
// "Read" for one it made up from another error, EOF for one) is seen only
// in what it wrote: "login error: read tcp …" or "login error: Read: EOF".
// The login's refusals keep their number (mssql.Error) and are not this.
func loginReadFailed(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if rest, ok := strings.CutPrefix(e.Error(), "login error: "); ok {
			return strings.HasPrefix(rest, "read ") || strings.HasPrefix(rest, "Read: ")
		}
	}
	return false
}
