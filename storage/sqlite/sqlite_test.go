package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
	"github.com/messagefoundry/mf/storage/storagetest"
)

// opener makes one database file per test and opens as many handles onto it
// as the test asks for, each with its own connection pool.
func opener(t testing.TB) func() storage.Store {
	path := filepath.Join(t.TempDir(), "mf.db")
	return func() storage.Store {
		s, err := sqlite.Open(context.Background(), sqlite.Options{Path: path})
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func TestConformanceSQLite(t *testing.T) { storagetest.Run(t, opener) }

func BenchmarkSQLite(b *testing.B) { storagetest.Bench(b, opener) }

func TestStoreIsSingleNode(t *testing.T) {
	s := opener(t)()
	if s.Dialect() != "sqlite" || s.Clusterable() {
		t.Fatalf("dialect %q clusterable %v, want sqlite, false", s.Dialect(), s.Clusterable())
	}
}

// Every pooled connection, not only the first, runs with WAL, synchronous=FULL,
// foreign keys, the busy timeout, and without SQLite's automatic checkpoint
// (the store's own runs off the commit path).
func TestEveryConnectionHasThePragmas(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db"), PoolSize: 3, BusyTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var conns []interface{ Close() error }
	for i := 0; i < 3; i++ {
		c, err := s.DB().Conn(ctx) // held, so each is a distinct connection
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		var journal string
		var sync, fk, busy, autoCheckpoint int
		for pragma, dest := range map[string]any{"journal_mode": &journal, "synchronous": &sync, "foreign_keys": &fk, "busy_timeout": &busy, "wal_autocheckpoint": &autoCheckpoint} {
			if err := c.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(dest); err != nil {
				t.Fatalf("connection %d: pragma %s: %v", i, pragma, err)
			}
		}
		if journal != "wal" || sync != 2 || fk != 1 || busy != 1500 || autoCheckpoint != 0 {
			t.Fatalf("connection %d: journal_mode=%s synchronous=%d foreign_keys=%d busy_timeout=%d wal_autocheckpoint=%d", i, journal, sync, fk, busy, autoCheckpoint)
		}
	}
	for _, c := range conns {
		c.Close()
	}
}

func TestOpenRefusesInMemory(t *testing.T) {
	for _, path := range []string{"", ":memory:"} {
		if s, err := sqlite.Open(context.Background(), sqlite.Options{Path: path}); err == nil {
			s.Close()
			t.Fatalf("Open(%q) succeeded", path)
		}
	}
}

// Ids are never reused, even once the newest rows have been purged
// (AUTOINCREMENT): an id names one message for good.
func TestIDsAreNeverReused(t *testing.T) {
	ctx := context.Background()
	s := opener(t)()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ingest := func() storage.IngestedMessage {
		t.Helper()
		res, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
			Inbound: "in", Payload: []byte("MSH|"), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/1"}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	first := ingest()
	c, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Lane: "lab/1", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.QueueComplete(ctx, storage.QueueCompleteParams{Claim: storage.Claim{ID: c.Row.ID, Attempt: c.Row.Attempts}}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.MessagePurge(ctx, storage.MessagePurgeParams{OlderThan: -time.Hour}); err != nil || res.Messages != 1 || res.QueueRows != 1 {
		t.Fatalf("purge: %+v, %v", res, err)
	}
	if second := ingest(); second.MessageID <= first.MessageID || second.QueueIDs[0] <= first.QueueIDs[0] {
		t.Fatalf("ids reused after purge: %+v then %+v", first, second)
	}
}

// Two handles (two pools on one file) writing at once queue on SQLite's
// write lock instead of failing with SQLITE_BUSY, and ingest batches stay
// whole and in id order.
func TestTwoHandlesWriteWithoutBusyErrors(t *testing.T) {
	ctx := context.Background()
	open := opener(t)
	a, b := open(), open()
	if err := a.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		s := []storage.Store{a, b}[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				batch := make([]storage.NewMessage, 5)
				for j := range batch {
					batch[j] = storage.NewMessage{Inbound: "in", Payload: []byte("MSH|"), Status: storage.MessageRouted,
						Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/1"}}}
				}
				res, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: batch})
				if err != nil {
					errs <- err
					return
				}
				for j := 1; j < len(res); j++ {
					if res[j].QueueIDs[0] != res[j-1].QueueIDs[0]+1 {
						errs <- fmt.Errorf("batch ids not contiguous: %+v", res)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lanes, err := b.QueueLanes(ctx, storage.QueueLanesParams{})
	if err != nil || len(lanes) != 1 || lanes[0].Depth != 8*25*5 {
		t.Fatalf("lanes %+v, %v; want one lane of %d rows", lanes, err, 8*25*5)
	}
}

// A path with the characters that mean something in a URI filename opens
// that very file.
func TestOpenOddPath(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a dir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mf?x=1#%41.db")
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at %q: %v", path, err)
	}
}

// An exclusive store refuses a second exclusive opener of the same file,
// and the file is free again once the first is closed.
func TestExclusiveRefusesASecondEngine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mf.db")
	ctx := context.Background()
	first, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true}); err == nil || !strings.Contains(err.Error(), "in use by another mf process") {
		t.Fatalf("second exclusive open: %v; want refused", err)
	}
	first.Close()
	again, err := sqlite.Open(ctx, sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	again.Close()
}

// A new database file, and the -wal and -shm files SQLite makes beside it,
// are readable by the owner only, whatever the umask: they hold every message
// received (PHI). SQLite's own default is 0644 less the umask, world-readable
// under the usual 022.
func TestANewDatabaseIsReadableByItsOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mf.db")
	s, err := sqlite.Open(context.Background(), sqlite.Options{Path: path, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm", path + ".lock"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v: group or others may read it", filepath.Base(name), perm)
		}
	}
}

// An existing database keeps the mode its operator gave it; one every local
// user can read is named in a WARN at open.
func TestAnExistingDatabaseKeepsItsModeAndOneOthersCanReadIsLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mf.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // past the umask
		t.Fatal(err)
	}
	var logged strings.Builder
	s, err := sqlite.Open(context.Background(), sqlite.Options{Path: path, Log: zerolog.New(&logged)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode after open: %v, %v; want it kept (0644)", fi.Mode(), err)
	}
	if !strings.Contains(logged.String(), `"level":"warn"`) || !strings.Contains(logged.String(), "readable by every local user") {
		t.Fatalf("logged %q; want a WARN that the store is readable by every local user", logged.String())
	}
}

// A row an operator's trigger skips (RAISE(IGNORE)) is a refusal. Taken
// for inserted, the skipped message's id was the one before it (the last
// insert id), and its queue row delivered that other message; a skipped
// queue row left a message stored without its delivery.
func TestARowATriggerSkipsIsRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ name, trigger string }{
		{"message", `CREATE TRIGGER mf_test_skip BEFORE INSERT ON mf_messages WHEN NEW.control_id = 'M2' BEGIN SELECT RAISE(IGNORE); END`},
		{"queue row", `CREATE TRIGGER mf_test_skip BEFORE INSERT ON mf_queue WHEN NEW.lane = 'lab/P2' BEGIN SELECT RAISE(IGNORE); END`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := opener(t)().(*sqlite.Store)
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := s.DB().ExecContext(ctx, tc.trigger); err != nil {
				t.Fatal(err)
			}
			msg := func(id, lane string) storage.NewMessage {
				return storage.NewMessage{Inbound: "in", ControlID: id, MessageType: "ADT^A01", Payload: []byte("MSH|" + id),
					Status: storage.MessageRouted, Deliveries: []storage.Delivery{{Destination: "out", Lane: lane}}}
			}
			out, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{msg("M1", "lab/P1"), msg("M2", "lab/P2")}})
			if err == nil {
				for _, m := range out {
					d, rerr := s.MessageRead(ctx, m.MessageID)
					t.Logf("message %d: %q, %d queue rows (read: %v)", m.MessageID, d.Message.ControlID, len(d.Queue), rerr)
				}
				t.Fatalf("ingest with a row skipped by a trigger: %+v, no error; want storage.ErrRefused", out)
			}
			if !errors.Is(err, storage.ErrRefused) {
				t.Fatalf("ingest with a row skipped by a trigger: %v; want storage.ErrRefused", err)
			}
		})
	}
}
