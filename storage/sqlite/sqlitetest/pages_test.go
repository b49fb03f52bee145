package sqlitetest_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/messagefoundry/mf/storage/sqlite/sqlitetest"
)

// LimitPages holds every connection of the pool at once, while the store's
// writer, inside its transaction, may need one more to prepare a statement
// it has not used yet: each then waited for the other for good, and a test
// of a full disk hung until the suite's timeout. LimitPages now lets go of
// the connections it holds when it cannot have them all within a second,
// and tries again.
func TestLimitPagesLetsAWriterNeedingAConnectionFinish(t *testing.T) {
	// As the store opens its file: WAL, and a busy timeout.
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "t.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	if _, err := db.Exec("CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}

	// The writer: a transaction on one connection, which then prepares a
	// new statement on the pool once LimitPages holds the other.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		for db.Stats().InUse < 2 { // LimitPages has the other connection
			time.Sleep(5 * time.Millisecond)
		}
		st, err := db.Prepare("INSERT INTO t VALUES (1)")
		if err == nil {
			_, err = tx.Stmt(st).Exec()
		}
		if err == nil {
			err = tx.Commit()
		}
		wrote <- err
	}()
	limited := make(chan struct{})
	go func() {
		sqlitetest.LimitPages(t, db, 100)
		close(limited)
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the writer and LimitPages waited for each other for 30s")
	}
	select {
	case <-limited:
	case <-time.After(30 * time.Second):
		t.Fatal("LimitPages did not finish once the writer had")
	}
}
