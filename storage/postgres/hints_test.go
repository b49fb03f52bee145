package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// What the database answers when it will not take mf's writes, and what
// mf's error then says to do. A read-only database (a hot standby after a
// managed failover, or default_transaction_read_only, which a managed
// service sets when its disk is nearly full) failed every write, election
// and renewal with PostgreSQL's "cannot execute UPDATE in a read-only
// transaction" and "check the database", and /ready answered 200, as the
// ping only reads. A role without rights, or out of sessions, said only
// PostgreSQL's words.
func TestStoreErrorsSayWhatToDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	schemaURL := pgtest.NewSchema(t)
	owner, err := postgres.Open(ctx, postgres.Options{URL: schemaURL, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if err := owner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ingest := func(s *postgres.Store) error {
		_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
			Inbound: "in", Payload: []byte("MSH|"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/1"}},
		}}})
		return err
	}
	open := func(u string) *postgres.Store {
		s, err := postgres.Open(ctx, postgres.Options{URL: u, PoolSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}

	t.Run("read-only", func(t *testing.T) {
		u, _ := url.Parse(schemaURL)
		q := u.Query()
		q.Set("default_transaction_read_only", "on") // as a standby, or ALTER DATABASE … SET, would have it
		u.RawQuery = q.Encode()
		ro := open(u.String())
		const want = "point [store] url at the primary"
		_, _, electErr := ro.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "n", TTL: time.Second})
		for what, err := range map[string]error{"ingest": ingest(ro), "election": electErr, "heartbeat": ro.NodeHeartbeat(ctx, storage.NodeHeartbeatParams{NodeID: "n"})} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s on a read-only database: %v; want an error that says to %s", what, err, want)
			}
		}
		if err := ro.Ping(ctx); !errors.Is(err, storage.ErrReadOnly) {
			t.Errorf("ping of a read-only database: %v; want storage.ErrReadOnly (/ready 503)", err)
		}
		if err := owner.Ping(ctx); err != nil {
			t.Errorf("ping of a writable database: %v", err)
		}
	})
	t.Run("a statement_timeout in the url", func(t *testing.T) {
		u, _ := url.Parse(schemaURL)
		q := u.Query()
		q.Set("statement_timeout", "100") // ms: the url's own is kept
		u.RawQuery = q.Encode()
		s := open(u.String())
		// An election waits for the lease row, held by an operator's
		// session, past the url's statement_timeout.
		tx, err := owner.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // only held
		if _, err := tx.Exec(ctx, "SELECT 1 FROM mf_leader_lease FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		_, _, err = s.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "n", TTL: time.Second})
		if err == nil || !strings.Contains(err.Error(), "57014") || !strings.Contains(err.Error(), "remove it") {
			t.Errorf("election cut short by the url's statement_timeout: %v; want SQLSTATE 57014 and an error that says to remove it", err)
		}
	})
	t.Run("no rights", func(t *testing.T) {
		s := open(pgtest.NewRole(t, ctx, schemaURL))
		if err := ingest(s); err == nil || !strings.Contains(err.Error(), "GRANT") {
			t.Errorf("ingest by a role without rights on mf's tables: %v; want an error that says what to GRANT", err)
		}
	})
	t.Run("no sessions left", func(t *testing.T) {
		s := open(pgtest.NewRole(t, ctx, schemaURL, "ALTER ROLE %ROLE CONNECTION LIMIT 0"))
		if err := ingest(s); err == nil || !strings.Contains(err.Error(), "pool_size") {
			t.Errorf("ingest by a role out of sessions: %v; want an error that names pool_size", err)
		}
		// mf run's first call, which it retries while the database
		// refuses sessions, saying so once a minute.
		if err := s.OwnSessions(ctx); err == nil || !strings.Contains(err.Error(), "pool_size") {
			t.Errorf("the sessions check by a role out of sessions: %v; want an error that names pool_size", err)
		}
	})
}

// A role's or a database's CONNECTION LIMIT below what a node opens
// (pool_size, the lease's session and the listener's) let the node start,
// and then its pool's new sessions were refused under load (SQLSTATE 53300):
// messages answered AE now and then, lanes retrying, nothing said at start.
// SessionLimits finds the limit, for mf run to warn of it.
func TestSessionLimitsFindsALimitBelowWhatANodeOpens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schemaURL := pgtest.NewSchema(t)
	for _, c := range []struct {
		name      string
		settings  []string
		clustered bool
		want      string
	}{
		{"none", nil, true, ""},
		{"the role's", []string{"ALTER ROLE %ROLE CONNECTION LIMIT 4"}, false, "CONNECTION LIMIT 4 of role"},
		{"the role's, enough", []string{"ALTER ROLE %ROLE CONNECTION LIMIT 40"}, true, ""},
		// Only a clustered node opens the lease's session and the
		// resignation listener's: a single node opens its pool and its
		// lock's session (HoldSingleNode).
		{"the role's, a clustered node", []string{"ALTER ROLE %ROLE CONNECTION LIMIT 6"}, true, "CONNECTION LIMIT 6 of role"},
		{"the role's, a single node", []string{"ALTER ROLE %ROLE CONNECTION LIMIT 5"}, false, "CONNECTION LIMIT 5 of role"},
		{"the role's, enough for a single node", []string{"ALTER ROLE %ROLE CONNECTION LIMIT 6"}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := postgres.Options{URL: pgtest.NewRole(t, ctx, schemaURL, c.settings...), PoolSize: 5}
			if c.clustered {
				o.IdleInTransactionTimeout = 20 * time.Second // as mf run sets it on a clustered node
			}
			s, err := postgres.Open(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := s.SessionLimits(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("session limits with %s: %q; want %q", c.name, got, c.want)
			}
			if got != "" && !strings.Contains(got, "pool_size 5") {
				t.Fatalf("session limits: %q; want it to name pool_size 5", got)
			}
		})
	}
}
