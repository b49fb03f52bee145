package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A fake driver that records what happens to its one transaction: on a
// real server an open transaction keeps every lock it took (the fence's
// shared lock on mf_leader_term, the lane head's UPDLOCK, the ingest
// application lock) until it ends.
type txProbe struct{ begun, committed, rolledBack atomic.Int32 }

type probeDriver struct{ p *txProbe }
type probeConn struct{ p *txProbe }
type probeTx struct{ p *txProbe }

func (d probeDriver) Open(string) (driver.Conn, error) { return probeConn(d), nil }
func (c probeConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("probe: no statements")
}
func (c probeConn) Close() error { return nil }
func (c probeConn) Begin() (driver.Tx, error) {
	c.p.begun.Add(1)
	return probeTx(c), nil
}
func (c probeConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) { return c.Begin() }
func (t probeTx) Commit() error                                                  { t.p.committed.Add(1); return nil }
func (t probeTx) Rollback() error                                                { t.p.rolledBack.Add(1); return nil }

// A write's function that panics (a driver bug decoding a reply, a nil
// dereference in a scan) must not leave its transaction open: the SQLite
// dialect rolls it back (TestAPanicInAWriteDoesNotWedgeTheWriter) and
// pgx.BeginFunc does on PostgreSQL. The lanes call the store with the
// term's context, which nothing cancels after a lane actor's panic, so
// database/sql's own rollback on cancellation never comes.
func TestAPanickingWriteRollsBackItsTransaction(t *testing.T) {
	p := &txProbe{}
	name := "mf-probe-" + t.Name()
	sql.Register(name, probeDriver{p})
	db, err := sql.Open(name, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := &Store{db: db}

	ctx := context.Background() // as the lanes' l.env.Ctx: not cancelled by the panic
	func() {
		defer func() { _ = recover() }() // protoactor recovers the lane actor's panic
		_ = s.inTx(ctx, func(*sql.Tx) error { panic("driver bug") })
	}()
	time.Sleep(50 * time.Millisecond)
	if p.begun.Load() != 1 {
		t.Fatalf("begun %d", p.begun.Load())
	}
	if p.rolledBack.Load() == 0 || db.Stats().InUse != 0 {
		t.Fatalf("after a panic in a write: rolled back %d times, committed %d, connections in use %d: the transaction (and on a server every lock it holds) stays open until ctx ends",
			p.rolledBack.Load(), p.committed.Load(), db.Stats().InUse)
	}
}
