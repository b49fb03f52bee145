package sqlserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/messagefoundry/mf/storage"
)

// laneStatements are the statements of the lanes' writes: each bounds its
// own waits for locks (laneLockWait).
var laneStatements = []string{"queue_claim_next", "queue_complete", "queue_give_back", "queue_release_own",
	"queue_retry", "queue_dead", "queue_hold", "queue_extend_lease"}

// Every statement of a lane's write waits at most laneLockWait for a lock,
// set in its own batch: SET LOCK_TIMEOUT, with XACT_ABORT ON (a lock
// timeout otherwise cancels only the statement and runs the rest of the
// batch: queue_complete.sql's SELECT @@ROWCOUNT would then say the claim
// was lost), before the batch touches a table; and each is sent with
// parameters, so through sp_executesql, at whose batch's end the setting
// ends: a statement without parameters is sent as a plain batch, whose SET
// would stay on the pooled connection and bound the waits of whatever ran
// on it next (an ingest, the fence). No other statement sets a lock
// timeout but the migrations' own (migrate_lock_timeout.sql, undone by
// migrate_lock_timeout_reset.sql on the same connection). Checked offline,
// as no SQL Server runs here.
//
// Without the bound, an open UPDATE of queue rows in another session held
// a pool connection for each lane whose rows it covered, for as long as
// the session lived: five lanes took the whole pool, and ingest (AE to
// every sender) and /ready got no connection, while the lease renewal, on
// its own connection, kept the node primary.
func TestLaneWritesBoundTheirLockWaits(t *testing.T) {
	setTimeout := regexp.MustCompile(`(?i)\bSET\s+LOCK_TIMEOUT\s+(-?\d+)\s*;`)
	xactAbort := regexp.MustCompile(`(?i)\bSET\s+XACT_ABORT\s+ON\b`)
	table := regexp.MustCompile(`(?i)\bmf_\w+`)
	for _, name := range laneStatements {
		if _, ok := queries[name]; !ok {
			t.Errorf("no statement %s.sql", name)
		}
	}
	for name, text := range queries {
		code := lineComment.ReplaceAllString(text, "")
		m := setTimeout.FindStringSubmatchIndex(code)
		if !slices.Contains(laneStatements, name) {
			if m != nil && name != "migrate_lock_timeout" && name != "migrate_lock_timeout_reset" {
				t.Errorf("%s.sql sets a lock timeout: only the lanes' statements bound their waits", name)
			}
			continue
		}
		if m == nil {
			t.Errorf("%s.sql, a lane's write, sets no lock timeout: it waits for another session's row lock for as long as that session holds it, a pool connection with it", name)
			continue
		}
		if ms := code[m[2]:m[3]]; ms != fmt.Sprint(laneLockWait.Milliseconds()) {
			t.Errorf("%s.sql: SET LOCK_TIMEOUT %s; want laneLockWait, %d ms", name, ms, laneLockWait.Milliseconds())
		}
		if tb := table.FindStringIndex(code); tb != nil && tb[0] < m[0] {
			t.Errorf("%s.sql: SET LOCK_TIMEOUT comes after the batch touches %s", name, code[tb[0]:tb[1]])
		}
		if x := xactAbort.FindStringIndex(code); x == nil || x[0] > m[0] {
			t.Errorf("%s.sql: no SET XACT_ABORT ON before the lock timeout: a timeout would cancel only the statement that waited, and the batch would go on", name)
		}
	}

	d := &fakeDriver{}
	db := sql.OpenDB(fakeConnector{d: d})
	defer db.Close()
	s := &Store{db: db, lease: db}
	ctx := context.Background()
	f := storage.Fence{Owner: "node-a", Term: 3}
	c := storage.Claim{ID: 7, Owner: "node-a", Attempt: 1}
	d.set("queue_claim_next") // no row: the lane is empty
	_, _ = s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: "lab/1", Owner: "node-a", LeaseTTL: time.Minute})
	_, _ = s.QueueAdvance(ctx, storage.QueueAdvanceParams{Fence: f, Claim: c, Lane: "lab/1", Owner: "node-a", LeaseTTL: time.Minute})
	_, _ = s.QueueGiveBack(ctx, storage.QueueGiveBackParams{Fence: f, Claims: []storage.Claim{c}})
	_, _ = s.QueueReleaseOwn(ctx, storage.QueueReleaseOwnParams{Fence: f, Lane: "lab/1", Owner: "node-a"})
	_ = s.QueueComplete(ctx, storage.QueueCompleteParams{Fence: f, Claim: c})
	_ = s.QueueRetry(ctx, storage.QueueRetryParams{Fence: f, Claim: c, Delay: time.Second})
	_ = s.QueueDead(ctx, storage.QueueDeadParams{Fence: f, Claim: c})
	_ = s.QueueHold(ctx, storage.QueueHoldParams{Fence: f, Claim: c})
	_ = s.QueueExtendLease(ctx, storage.QueueExtendLeaseParams{Fence: f, Claim: c, TTL: time.Minute})
	sent := map[string]bool{}
	for _, call := range d.calls {
		if !slices.Contains(laneStatements, call.name) {
			continue
		}
		sent[call.name] = true
		if len(call.args) == 0 {
			t.Errorf("%s.sql is sent without parameters: as a plain batch, not through sp_executesql, so its SET LOCK_TIMEOUT would stay on the pooled connection", call.name)
		}
	}
	for _, name := range laneStatements {
		if !sent[name] {
			t.Errorf("%s.sql was not run by the lanes' methods", name)
		}
	}
}

// A lane's write whose wait for a lock ran out (SQL Server's error 1222)
// fails as a store error its lane tries again after its pause, as
// PostgreSQL's lock timeout (SQLSTATE 55P03) does: not a fence (the lane
// would stop), not a claim lost or a row refused (the lane would act on the
// row), not run again in place as a deadlock victim is (its connection
// would stay taken); its transaction is rolled back and its connection
// given back to the pool. Checked offline on a fake driver.
func TestALaneWriteWhoseLockWaitRanOutIsTriedAgainByItsLane(t *testing.T) {
	timedOut := fmt.Errorf("mssql: %w", mssql.Error{Number: errLockTimeout, Message: "Lock request time out period exceeded."})
	for _, op := range []string{"queue_claim_next", "queue_complete"} {
		t.Run(op, func(t *testing.T) {
			d := &fakeDriver{queryErr: func(name string) error {
				if name == op {
					return timedOut
				}
				return nil
			}}
			db := sql.OpenDB(fakeConnector{d: d})
			defer db.Close()
			s := &Store{db: db, lease: db}
			ctx := context.Background()
			f := storage.Fence{Owner: "node-a", Term: 3}
			var err error
			if op == "queue_claim_next" {
				_, err = s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: "lab/1", Owner: "node-a", LeaseTTL: time.Minute})
			} else {
				err = s.QueueComplete(ctx, storage.QueueCompleteParams{Fence: f, Claim: storage.Claim{ID: 7, Owner: "node-a", Attempt: 1}})
			}
			for _, not := range []error{storage.ErrFenced, storage.ErrNoWork, storage.ErrClaimLost, storage.ErrNotFound, storage.ErrRefused, storage.ErrFull} {
				if errors.Is(err, not) {
					t.Errorf("%v: is %v; want a store error its lane tries again", err, not)
				}
			}
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("it waited %s for a lock that another session holds", laneLockWait)) || !lockTimedOut(err) {
				t.Errorf("%v; want the lock timeout (1222), saying it waited %s for another session's lock", err, laneLockWait)
			}
			if n := d.ran(op); n != 1 {
				t.Errorf("%s.sql ran %d times; want once: the lane tries again after its pause, its connection given back meanwhile", op, n)
			}
			if inUse := db.Stats().InUse; inUse != 0 {
				t.Errorf("%d connections in use after the write failed; want none", inUse)
			}
		})
	}
}
