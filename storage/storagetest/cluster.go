package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/messagefoundry/mf/storage"
)

// Two nodes starting together both migrate without error, and the schema is
// applied once.
func testMigrateConcurrent(t *testing.T, h *harness) {
	// Nodes starting at once on a fresh database, then on a migrated one
	// (the harness's): the migrations apply once, whoever takes the lock
	// first, and the others find them applied.
	for _, open := range []func() storage.Store{h.newDB(t), h.open} {
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		stores := openStores(open, 4)
		begin := make(chan struct{})
		for _, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-begin
				errs <- s.Migrate(h.ctx)
			}()
		}
		close(begin)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent migrate: %v", err)
			}
		}
	}
	if err := h.s.Ping(h.ctx); err != nil {
		t.Fatalf("ping after migrate: %v", err)
	}
	l, err := h.s.LeaseRead(h.ctx)
	if err != nil || l.Owner != "" || l.Term != 0 {
		t.Fatalf("fresh lease: %+v, %v; want never elected", l, err)
	}
}

// migrationRecorder is what a dialect's tests add to its store
// (export_test.go): a migration recorded as applied, as a newer mf's would be.
type migrationRecorder interface {
	RecordMigration(ctx context.Context, version int, name string) error
}

// A database a newer mf has migrated is refused, and left as it is: an
// older mf would write to it with statements written for its own schema.
// A running store's SchemaCheck says so too (a newer mf migrate ran while
// it ran), and nothing before.
func testMigrateRefusesNewer(t *testing.T, h *harness) {
	r, ok := h.s.(migrationRecorder)
	if !ok {
		t.Fatalf("%T has no RecordMigration: add it to the dialect's export_test.go", h.s)
	}
	if err := h.s.SchemaCheck(h.ctx); err != nil {
		t.Fatalf("schema check of a schema this build migrated: %v", err)
	}
	if err := r.RecordMigration(h.ctx, 9999, "9999_from_a_newer_mf"); err != nil {
		t.Fatal(err)
	}
	if err := h.s.SchemaCheck(h.ctx); !errors.Is(err, storage.ErrSchemaNewer) || !strings.Contains(err.Error(), "[9999]") {
		t.Fatalf("schema check of a newer schema: %v; want ErrSchemaNewer naming migration 9999", err)
	}
	err := h.open().Migrate(h.ctx)
	if !errors.Is(err, storage.ErrSchemaNewer) || !strings.Contains(err.Error(), "[9999]") {
		t.Fatalf("migrate of a newer schema: %v; want ErrSchemaNewer naming migration 9999", err)
	}
	if err := h.s.Ping(h.ctx); err != nil {
		t.Fatalf("ping after the refused migrate: %v", err)
	}
}

// migrationForgetter is what a dialect's tests add to its store
// (export_test.go): an applied migration's record removed, as a schema an
// older mf migrated looks to this one.
type migrationForgetter interface {
	ForgetMigration(ctx context.Context, version int) error
}

// A schema that lacks a migration of this build (a newer mf's command run
// before mf migrate, in a rolling upgrade) is said to be older by
// SchemaCheck, naming the migration, so that such a command can say to run
// mf migrate rather than fail on a column it lacks.
func testSchemaCheckSaysOlder(t *testing.T, h *harness) {
	f, ok := h.s.(migrationForgetter)
	if !ok {
		t.Fatalf("%T has no ForgetMigration: add it to the dialect's export_test.go", h.s)
	}
	if err := f.ForgetMigration(h.ctx, 1); err != nil {
		t.Fatal(err)
	}
	err := h.s.SchemaCheck(h.ctx)
	if !errors.Is(err, storage.ErrSchemaOlder) || !strings.Contains(err.Error(), "[1]") || !strings.Contains(err.Error(), "mf migrate") {
		t.Fatalf("schema check of a schema without migration 1: %v; want ErrSchemaOlder naming migration 1 and mf migrate", err)
	}
}

// Elect only on an expired or resigned lease, never preempting; renew only
// for the same owner and term; resign frees it at once; every election
// increments the term by one.
func testLeaseElection(t *testing.T, h *harness) {
	elect := func(owner string, ttl time.Duration) (storage.Lease, bool) {
		t.Helper()
		l, ok, err := h.s.LeaseAttemptElect(h.ctx, storage.LeaseAttemptElectParams{Owner: owner, TTL: ttl})
		if err != nil {
			t.Fatalf("elect %s: %v", owner, err)
		}
		return l, ok
	}
	renew := func(owner string, term int64) (storage.Lease, error) {
		return h.s.LeaseAttemptRenew(h.ctx, storage.LeaseAttemptRenewParams{Owner: owner, Term: term, TTL: time.Minute})
	}

	a, ok := elect("node-a", time.Minute)
	if !ok || a.Owner != "node-a" || a.Term != 1 {
		t.Fatalf("first election: %+v elected=%v, want node-a term 1", a, ok)
	}
	if r := a.Remaining(); r < 59*time.Second || r > time.Minute {
		t.Fatalf("lease remaining %v, want about the ttl on the database clock", r)
	}
	// Never preempt a live lease, not even one's own.
	if l, ok := elect("node-b", time.Minute); ok || l.Owner != "node-a" || l.Term != 1 || l.Remaining() <= 0 {
		t.Fatalf("node-b preempted or got a wrong view: %+v elected=%v", l, ok)
	}
	if _, ok := elect("node-a", time.Minute); ok {
		t.Fatal("node-a re-elected itself over its own live lease")
	}

	// Renew: only the same owner and term.
	renewed, err := renew("node-a", 1)
	if err != nil || renewed.Term != 1 || renewed.ExpiresAt.Before(a.ExpiresAt) {
		t.Fatalf("renew: %+v, %v", renewed, err)
	}
	// A renewal counts the TTL from the database's now, not from the
	// expiry it replaces: a lease renewed every heartbeat would otherwise
	// grow by a TTL each time, and a crashed leader's successor wait for all
	// of it.
	if r := renewed.Remaining(); r < 59*time.Second || r > time.Minute {
		t.Fatalf("lease remaining %v after a renewal with a TTL of 1m, want about the TTL from the database's now", r)
	}
	if _, err := renew("node-a", 2); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("renew with a wrong term: want ErrLeaseLost, got %v", err)
	}
	if _, err := renew("node-b", 1); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("renew by another owner: want ErrLeaseLost, got %v", err)
	}

	// Resign: only the holder; then another owner elects at once.
	if ok, err := h.s.LeaseResign(h.ctx, storage.LeaseResignParams{Owner: "node-b", Term: 1}); err != nil || ok {
		t.Fatalf("resign by a non-holder: resigned=%v err=%v", ok, err)
	}
	if ok, err := h.s.LeaseResign(h.ctx, storage.LeaseResignParams{Owner: "node-a", Term: 1}); err != nil || !ok {
		t.Fatalf("resign: resigned=%v err=%v", ok, err)
	}
	b, ok := elect("node-b", 400*time.Millisecond)
	if !ok || b.Term != 2 {
		t.Fatalf("election after resign: %+v elected=%v, want node-b term 2", b, ok)
	}
	if _, err := renew("node-a", 1); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("old leader renew after a newer term: want ErrLeaseLost, got %v", err)
	}

	// Expiry: once node-b's lease runs out on the database clock, node-a wins
	// term 3; not a moment before.
	var c storage.Lease
	h.waitFor("node-b's lease to expire", 10*time.Second, func() bool {
		c, ok = elect("node-a", time.Minute)
		return ok
	})
	if c.Term != 3 || c.AcquiredAt.Before(b.ExpiresAt) {
		t.Fatalf("election after expiry: %+v, want term 3 acquired after %v", c, b.ExpiresAt)
	}
	if _, err := renew("node-b", 2); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("expired leader renew after a newer term: want ErrLeaseLost, got %v", err)
	}
	if l, err := h.s.LeaseRead(h.ctx); err != nil || l.Owner != "node-a" || l.Term != 3 {
		t.Fatalf("lease read: %+v, %v", l, err)
	}
}

// snapshot is everything a fenced write could change, read back whole.
type snapshot struct {
	Messages map[int64]storage.MessageDetail
	Lanes    []storage.LaneSummary
	Stats    []storage.QueueStat
}

func (h *harness) snapshot(msgIDs []int64) snapshot {
	h.t.Helper()
	s := snapshot{Messages: map[int64]storage.MessageDetail{}}
	for _, id := range msgIDs {
		d, err := h.s.MessageRead(h.ctx, id)
		if err != nil {
			h.t.Fatalf("read message %d: %v", id, err)
		}
		s.Messages[id] = d
	}
	var err error
	if s.Lanes, err = h.s.QueueLanes(h.ctx, storage.QueueLanesParams{}); err != nil {
		h.t.Fatalf("lanes: %v", err)
	}
	for i := range s.Lanes {
		s.Lanes[i].HeadAge = 0 // grows with time, not with writes
	}
	if s.Stats, err = h.s.QueueStats(h.ctx); err != nil {
		h.t.Fatalf("stats: %v", err)
	}
	for i := range s.Stats {
		s.Stats[i].OldestAge = 0 // as HeadAge
	}
	return s
}

// After another node wins a newer term, every fenced operation of the old
// term fails with ErrFenced and changes nothing.
func testFencedOperations(t *testing.T, h *harness) {
	old := h.elect("node-a", time.Minute)
	q := h.fill(old, "lab", "A", 3)
	b := h.fill(old, "lab", "B", 1)
	h.fill(old, "lab", "C", 1)
	h.complete(old, h.mustClaim(old, "lab/A", time.Minute, q[0]))
	held := h.mustClaim(old, "lab/A", time.Minute, q[1]) // in flight, live lease
	h.mustClaim(old, "lab/B", time.Millisecond, b[0])    // in flight, lease expired

	// node-a is partitioned; its lease expires; node-b wins term 2.
	if _, err := h.s.LeaseResign(h.ctx, storage.LeaseResignParams{Owner: old.Owner, Term: old.Term}); err != nil {
		t.Fatalf("resign: %v", err)
	}
	newer := h.elect("node-b", time.Minute)
	if newer.Term != old.Term+1 {
		t.Fatalf("new term %d, want %d", newer.Term, old.Term+1)
	}

	var msgIDs []int64
	for _, id := range h.msgOf {
		msgIDs = append(msgIDs, id)
	}
	before := h.snapshot(msgIDs)
	ops := map[string]func(f storage.Fence) error{
		"ingest": func(f storage.Fence) error {
			_, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{msg("lab", "D")}})
			return err
		},
		"claim": func(f storage.Fence) error {
			_, err := h.claim(f, "lab/C", time.Minute)
			return err
		},
		"complete": func(f storage.Fence) error {
			return h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: f, Claim: held.Claim()})
		},
		"complete naming the lane": func(f storage.Fence) error {
			return h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: f, Claim: held.Claim(), Lane: "lab/A"})
		},
		"advance": func(f storage.Fence) error {
			_, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: f, Claim: held.Claim(), Lane: "lab/A", Owner: ownerOf(f), LeaseTTL: time.Minute})
			return err
		},
		"give back": func(f storage.Fence) error {
			_, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: f, Claims: []storage.Claim{held.Claim()}})
			return err
		},
		"give back naming the lane": func(f storage.Fence) error {
			_, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: f, Claims: []storage.Claim{held.Claim()}, Lane: "lab/A"})
			return err
		},
		"release own": func(f storage.Fence) error {
			_, err := h.s.QueueReleaseOwn(h.ctx, storage.QueueReleaseOwnParams{Fence: f, Lane: "lab/A", Owner: ownerOf(old)})
			return err
		},
		"retry": func(f storage.Fence) error {
			return h.s.QueueRetry(h.ctx, storage.QueueRetryParams{Fence: f, Claim: held.Claim(), Delay: time.Second, Error: "x"})
		},
		"dead": func(f storage.Fence) error {
			return h.s.QueueDead(h.ctx, storage.QueueDeadParams{Fence: f, Claim: held.Claim(), Error: "x"})
		},
		"hold": func(f storage.Fence) error {
			return h.s.QueueHold(h.ctx, storage.QueueHoldParams{Fence: f, Claim: held.Claim(), Error: "x"})
		},
		"extend": func(f storage.Fence) error {
			return h.s.QueueExtendLease(h.ctx, storage.QueueExtendLeaseParams{Fence: f, Claim: held.Claim(), TTL: time.Hour})
		},
		"recover": func(f storage.Fence) error {
			_, err := h.s.QueueRecoverForeign(h.ctx, storage.QueueRecoverForeignParams{Fence: f, Owner: ownerOf(f)})
			return err
		},
		"reclaim": func(f storage.Fence) error {
			_, err := h.s.QueueReclaimExpired(h.ctx, storage.QueueReclaimExpiredParams{Fence: f})
			return err
		},
		"purge": func(f storage.Fence) error {
			_, err := h.s.MessagePurge(h.ctx, storage.MessagePurgeParams{Fence: f, OlderThan: -time.Hour})
			return err
		},
	}
	for name, op := range ops {
		// The last one has the current term under another owner: the fence
		// checks both (DESIGN §4), not the term alone.
		for _, f := range []storage.Fence{old, zero, {Owner: newer.Owner, Term: old.Term}, {Owner: old.Owner, Term: newer.Term}} {
			if err := op(f); !errors.Is(err, storage.ErrFenced) {
				t.Errorf("%s with stale fence %+v: want ErrFenced, got %v", name, f, err)
			} else if strings.Contains(err.Error(), "lab/") {
				t.Errorf("%s: the error names a lane (%v); a lane's key is often a patient id, and the engine logs these errors", name, err)
			}
		}
	}
	if after := h.snapshot(msgIDs); !reflect.DeepEqual(before, after) {
		t.Fatalf("fenced writes changed the store:\nbefore %+v\nafter  %+v", before, after)
	}
	// The current term's writes do go through (so the checks above can fail).
	if err := ops["claim"](newer); err != nil {
		t.Fatalf("claim under the current term: %v", err)
	}
}

// Promotion recovery re-pends only rows leased by other owners, whatever
// their lease expiry, and leaves the new leader's own rows alone.
func testRecoverForeign(t *testing.T, h *harness) {
	a := h.elect("node-a", time.Minute)
	l1 := h.fill(a, "lab", "1", 2)
	l2 := h.fill(a, "lab", "2", 1)
	l3 := h.fill(a, "lab", "3", 1)
	h.mustClaim(a, "lab/1", time.Hour, l1[0])        // live lease, an hour left
	h.mustClaim(a, "lab/2", time.Millisecond, l2[0]) // lease already expired

	// node-a's lease lapses; node-b is promoted and claims lane 3 itself.
	if _, err := h.s.LeaseResign(h.ctx, storage.LeaseResignParams{Owner: a.Owner, Term: a.Term}); err != nil {
		t.Fatalf("resign: %v", err)
	}
	b := h.elect("node-b", time.Minute)
	own := h.mustClaim(b, "lab/3", time.Hour, l3[0])

	n, err := h.s.QueueRecoverForeign(h.ctx, storage.QueueRecoverForeignParams{Fence: b, Owner: b.Owner})
	if err != nil || n != 2 {
		t.Fatalf("recover foreign: %d rows, err %v; want 2", n, err)
	}
	for _, id := range []int64{l1[0], l2[0]} {
		if r := h.queueRow(id); r.Status != storage.QueuePending || r.LeaseOwner != "" || r.LeaseExpiresAt != nil || r.Attempts != 1 {
			t.Fatalf("recovered row %d: %+v", id, r)
		}
	}
	if r := h.queueRow(l3[0]); r.Status != storage.QueueInflight || r.LeaseOwner != "node-b" {
		t.Fatalf("own row %d was touched: %+v", l3[0], r)
	}
	// The recovered head is delivered before anything newer of its lane.
	c := h.mustClaim(b, "lab/1", time.Minute, l1[0])
	if c.Row.Attempts != 2 {
		t.Fatalf("recovered head attempts %d, want 2", c.Row.Attempts)
	}
	h.complete(b, c)
	h.complete(b, own)
	if n, err := h.s.QueueRecoverForeign(h.ctx, storage.QueueRecoverForeignParams{Fence: b, Owner: b.Owner}); err != nil || n != 0 {
		t.Fatalf("second recovery: %d rows, err %v; want 0", n, err)
	}
}

// Promotion recovery gives back the attempt of each row claimed ahead of
// its lane's head, which was never sent (a lane sends a row only once the
// one before it is done), and keeps the head's, which may have been: with
// max_attempts, every failover used up an attempt of each row claimed
// ahead, and held or set it aside one real attempt early.
func testRecoverForeignGivesBackTheAttemptsOfRowsClaimedAhead(t *testing.T, h *harness) {
	a := h.elect("node-a", time.Minute)
	ids := h.fill(a, "lab", "1", 4)
	first := h.mustClaim(a, "lab/1", time.Hour, ids[0])
	adv, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: a, Claim: first.Claim(), Lane: "lab/1", Owner: a.Owner, LeaseTTL: time.Hour, Ahead: 2})
	if err != nil || adv.Next == nil || len(adv.Ahead) != 2 {
		t.Fatalf("advance with 2 ahead: %+v, %v", adv, err)
	}
	// node-a fails while sending ids[1], with ids[2] and ids[3] claimed
	// ahead of it; node-b is promoted.
	if _, err := h.s.LeaseResign(h.ctx, storage.LeaseResignParams{Owner: a.Owner, Term: a.Term}); err != nil {
		t.Fatalf("resign: %v", err)
	}
	b := h.elect("node-b", time.Minute)
	if n, err := h.s.QueueRecoverForeign(h.ctx, storage.QueueRecoverForeignParams{Fence: b, Owner: b.Owner}); err != nil || n != 3 {
		t.Fatalf("recover foreign: %d rows, err %v; want 3", n, err)
	}
	for id, want := range map[int64]int64{ids[1]: 1, ids[2]: 0, ids[3]: 0} {
		if r := h.queueRow(id); r.Status != storage.QueuePending || r.Attempts != want {
			t.Errorf("recovered row %d: %s with %d attempts; want pending with %d (the head may have been sent; the rows ahead were not)", id, r.Status, r.Attempts, want)
		}
	}
	// Each is delivered in order, the rows ahead at their first attempt.
	for i, id := range ids[1:] {
		c := h.mustClaim(b, "lab/1", time.Minute, id)
		if want := map[bool]int64{true: 2, false: 1}[i == 0]; c.AttemptsSinceRetry() != want {
			t.Errorf("row %d claimed with %d attempts since retry; want %d", id, c.AttemptsSinceRetry(), want)
		}
		h.complete(b, c)
	}
}

// A single-node process that restarts (same zero fence, a new process) gets
// its predecessor's in-flight rows back at once: the row lease belongs to the
// process, not to the fence.
func testRecoverAfterRestart(t *testing.T, h *harness) {
	ids := h.fill(zero, "lab", "1", 2)
	before, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: "lab/1", Owner: "host:100:aa", LeaseTTL: time.Hour})
	if err != nil || before.Row.ID != ids[0] {
		t.Fatalf("claim by the first process: %+v, %v", before.Row, err)
	}
	// kill -9; the next process starts with a new owner.
	n, err := h.s.QueueRecoverForeign(h.ctx, storage.QueueRecoverForeignParams{Fence: zero, Owner: "host:200:bb"})
	if err != nil || n != 1 {
		t.Fatalf("recovery by the restarted process: %d rows, err %v; want 1", n, err)
	}
	after, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: "lab/1", Owner: "host:200:bb", LeaseTTL: time.Hour})
	if err != nil || after.Row.ID != ids[0] || after.Row.Attempts != 2 || after.Row.LeaseOwner != "host:200:bb" {
		t.Fatalf("the restarted process claims %+v, %v; want the stranded head again", after.Row, err)
	}
	// The dead process's claim can no longer finish the row.
	if err := h.s.QueueComplete(h.ctx, storage.QueueCompleteParams{Fence: zero, Claim: before.Claim()}); !errors.Is(err, storage.ErrClaimLost) {
		t.Fatalf("complete by the dead process: want ErrClaimLost, got %v", err)
	}
}

// An ingest batch commits whole or not at all.
func testIngestAtomic(t *testing.T, h *harness) {
	two := func(key string) storage.NewMessage {
		m := msg("lab", key)
		m.Deliveries = append(m.Deliveries, storage.Delivery{Destination: "ris", Lane: "ris/" + key})
		return m
	}
	bad := msg("lab", "X")
	bad.Status = "bogus" // refused by the schema, after two good messages
	_, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{two("A"), two("B"), bad}})
	if err == nil {
		t.Fatal("ingest of a batch with an invalid message succeeded")
	}
	// Refused, so that the ingest stores the others without it; in the
	// database's terms only, never quoting the value.
	if !errors.Is(err, storage.ErrRefused) || errors.Is(err, storage.ErrFenced) || strings.Contains(err.Error(), "bogus") {
		t.Fatalf("ingest of a value the schema refuses: %v; want ErrRefused, without the value", err)
	}
	if lanes, err := h.s.QueueLanes(h.ctx, storage.QueueLanesParams{}); err != nil || len(lanes) != 0 {
		t.Fatalf("after the failed batch: lanes %+v, err %v; want none", lanes, err)
	}

	unrouted := storage.NewMessage{Inbound: "in", ControlID: "u1", MessageType: "ORU^R01", Payload: []byte("MSH|^~\\&|x"), Status: storage.MessageUnrouted}
	rejected := storage.NewMessage{Inbound: "in", Payload: []byte("garbage"), Status: storage.MessageRejected, Error: "no MSH segment"}
	res, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{two("A"), unrouted, two("B"), rejected}})
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}
	for id := int64(1); id < res[0].MessageID; id++ {
		if _, err := h.s.MessageRead(h.ctx, id); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("message %d of the failed batch exists (err %v)", id, err)
		}
	}
	wantQueue := []int{2, 0, 2, 0}
	var last int64
	for i, r := range res {
		d, err := h.s.MessageRead(h.ctx, r.MessageID)
		if err != nil {
			t.Fatalf("read message %d: %v", r.MessageID, err)
		}
		if len(d.Queue) != wantQueue[i] || len(r.QueueIDs) != wantQueue[i] {
			t.Fatalf("message %d: %d queue rows, want %d", i, len(d.Queue), wantQueue[i])
		}
		for _, q := range d.Queue {
			if q.ID <= last || q.Status != storage.QueuePending || q.Attempts != 0 {
				t.Fatalf("queue row %+v out of order or not fresh", q)
			}
			last = q.ID
		}
		if r.MessageID <= res[max(i-1, 0)].MessageID && i > 0 {
			t.Fatalf("message ids out of order: %+v", res)
		}
	}
	d, _ := h.s.MessageRead(h.ctx, res[3].MessageID)
	if d.Message.Status != storage.MessageRejected || d.Message.Error != "no MSH segment" || string(d.Message.Payload) != "garbage" {
		t.Fatalf("rejected message stored as %+v", d.Message)
	}
	d, _ = h.s.MessageRead(h.ctx, res[0].MessageID)
	if d.Message.ControlID != "ctl-lab-A" || d.Message.MessageType != "ADT^A01" || d.Message.Inbound != "in" || d.Message.ReceivedAt.IsZero() {
		t.Fatalf("routed message stored as %+v", d.Message)
	}
}

// A message with no payload (a nil slice: an empty frame) is stored, empty,
// and delivered: PostgreSQL and SQL Server stored it so, while SQLite bound
// nil as NULL and refused it (NOT NULL: storage.ErrRefused), answering AE.
func testIngestNilPayload(t *testing.T, h *harness) {
	m := msg("lab", "EMPTY")
	m.Payload = nil
	res, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{m}})
	if err != nil {
		t.Fatalf("ingest of a message with a nil payload: %v; want it stored empty", err)
	}
	d, err := h.s.MessageRead(h.ctx, res[0].MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message.Payload == nil || len(d.Message.Payload) != 0 {
		t.Fatalf("payload read back %#v; want empty, not nil", d.Message.Payload)
	}
	if c := h.mustClaim(zero, "lab/EMPTY", time.Minute, res[0].QueueIDs[0]); c.Payload == nil || len(c.Payload) != 0 {
		t.Fatalf("payload claimed %#v; want empty, not nil", c.Payload)
	}
}

// Whatever bytes a message's fields hold and however long its lane key, the
// message as the ingest hands it over (NewMessage.Storable) is stored, in
// one batch with others, and its lane is claimable by the stored name. Raw,
// a NUL, Latin-1 or a lane key of a few kilobytes failed the whole batch on
// PostgreSQL (and a lane over 800 characters on SQL Server).
func testIngestStorable(t *testing.T, h *harness) {
	long := func(tail string) string { // ~3 KB of high-entropy text, as no index can compress
		var b strings.Builder
		for i := range 200 {
			b.WriteString(fmt.Sprintf("%016x", uint64(i+1)*0x9e3779b97f4a7c15))
		}
		return b.String() + tail
	}
	odd := msg("lab", "M\xdcLLER\x00")
	odd.ControlID, odd.MessageType = "C\x001\xc4", "ADT\x00A01"
	keys := []string{long("é1"), long("é2")} // kept parts equal; the lanes must differ
	var batch []storage.NewMessage
	for _, k := range keys {
		m := msg("lab", k)
		m.Deliveries = append(m.Deliveries, storage.Delivery{Destination: "ris", Lane: "ris/€" + k})
		batch = append(batch, m)
	}
	batch = append(batch, msg("lab", "P1"), odd)
	stored := make([]storage.NewMessage, len(batch))
	for i, m := range batch {
		stored[i] = m.Storable()
	}
	if stored[0].Deliveries[0].Lane == stored[1].Deliveries[0].Lane {
		t.Fatalf("two long keys that differ only at the end share lane %q", stored[0].Deliveries[0].Lane)
	}
	if batch[0].Deliveries[0].Lane != "lab/"+keys[0] {
		t.Fatal("Storable changed the caller's deliveries")
	}
	res, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: stored})
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}

	lanes := map[string]bool{}
	for i, m := range stored {
		for j, d := range m.Deliveries {
			if len(d.Lane) > storage.MaxLaneBytes || !utf8.ValidString(d.Lane) {
				t.Fatalf("lane of %d bytes (valid UTF-8: %v); want at most %d", len(d.Lane), utf8.ValidString(d.Lane), storage.MaxLaneBytes)
			}
			lanes[d.Lane] = true
			if c := h.mustClaim(zero, d.Lane, time.Minute, res[i].QueueIDs[j]); c.Row.Lane != d.Lane {
				t.Fatalf("claimed a row of lane %q; want %q", c.Row.Lane, d.Lane)
			}
		}
	}
	if len(lanes) != 6 {
		t.Fatalf("%d distinct lanes; want 6", len(lanes))
	}
	d, err := h.s.MessageRead(h.ctx, res[3].MessageID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Message.ControlID != "C\uFFFD1\uFFFD" || d.Message.MessageType != "ADT\uFFFDA01" || d.Queue[0].Lane != "lab/M\uFFFDLLER\uFFFD" ||
		!bytes.Equal(d.Message.Payload, batch[3].Payload) {
		t.Fatalf("stored %q %q lane %q; want the text made valid and the payload as received", d.Message.ControlID, d.Message.MessageType, d.Queue[0].Lane)
	}
}

// Purge deletes only finished rows older than the cut-off, then the messages
// left without queue rows; the sweep re-pends only expired leases.
// The purge deletes the rows of nodes not seen since the cut-off (every
// restart with an automatic node id leaves one, and mf_nodes grew for good)
// and keeps the others; a purged node's next heartbeat writes its row again.
func testPurgeNodes(t *testing.T, h *harness) {
	beat := func(id string) {
		t.Helper()
		if err := h.s.NodeHeartbeat(h.ctx, storage.NodeHeartbeatParams{NodeID: id, Host: "h", PID: 1}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() []string {
		t.Helper()
		l, err := h.s.NodeList(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range l.Nodes {
			out = append(out, n.NodeID)
		}
		return out
	}
	beat("gone")
	if err := h.s.NodeLeave(h.ctx, storage.NodeLeaveParams{NodeID: "gone"}); err != nil {
		t.Fatal(err)
	}
	beat("crashed")
	h.waitDBClockPast(h.dbNow().Add(1200 * time.Millisecond))
	beat("live")
	res, err := h.s.MessagePurge(h.ctx, storage.MessagePurgeParams{Fence: zero, OlderThan: time.Second})
	if err != nil {
		t.Fatalf("purge: %v", err)
	}
	if got := ids(); res.Nodes != 2 || !reflect.DeepEqual(got, []string{"live"}) {
		t.Fatalf("purge deleted %d nodes, left %v; want 2 deleted (gone, crashed), [live] left", res.Nodes, got)
	}
	beat("crashed") // it comes back
	if got := ids(); !reflect.DeepEqual(got, []string{"crashed", "live"}) {
		t.Fatalf("after a purged node's heartbeat: %v, want [crashed live]", got)
	}
}

func testPurge(t *testing.T, h *harness) {
	oldDone := h.fill(zero, "lab", "1", 1)[0]
	oldDead := h.fill(zero, "lab", "2", 1)[0]
	pending := h.fill(zero, "lab", "3", 1)[0]
	inflight := h.fill(zero, "lab", "4", 1)[0]
	lateDone := h.fill(zero, "lab", "6", 1)[0] // received before the cut-off, finished after it
	unrouted, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{
		{Inbound: "in", Payload: []byte("MSH|^~\\&|x"), Status: storage.MessageUnrouted},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h.complete(zero, h.mustClaim(zero, "lab/1", time.Minute, oldDone))
	c := h.mustClaim(zero, "lab/2", time.Minute, oldDead)
	if err := h.s.QueueDead(h.ctx, storage.QueueDeadParams{Fence: zero, Claim: c.Claim(), Error: "x"}); err != nil {
		t.Fatal(err)
	}
	h.mustClaim(zero, "lab/4", time.Hour, inflight)

	// Let the database clock move a full second past the old rows, then
	// finish one more row: it is younger than the one-second cut-off.
	h.waitDBClockPast(h.queueRow(oldDead).UpdatedAt.Add(1200 * time.Millisecond))
	youngDone := h.fill(zero, "lab", "5", 1)[0]
	h.complete(zero, h.mustClaim(zero, "lab/5", time.Minute, youngDone))
	h.complete(zero, h.mustClaim(zero, "lab/6", time.Minute, lateDone))
	// A message without queue rows is kept until it is as old as the
	// cut-off too: one that is only newly unrouted or rejected stays to be
	// looked at.
	youngUnrouted, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{
		{Inbound: "in", Payload: []byte("MSH|^~\\&|y"), Status: storage.MessageUnrouted},
	}})
	if err != nil {
		t.Fatal(err)
	}

	res, err := h.s.MessagePurge(h.ctx, storage.MessagePurgeParams{Fence: zero, OlderThan: time.Second})
	if err != nil {
		t.Fatalf("purge: %v", err)
	}
	if res.QueueRows != 2 || res.Messages != 3 {
		t.Fatalf("purge deleted %+v, want 2 queue rows and 3 messages (done, dead, unrouted)", res)
	}
	gone := []int64{h.msgOf[oldDone], h.msgOf[oldDead], unrouted[0].MessageID}
	kept := []int64{h.msgOf[pending], h.msgOf[inflight], h.msgOf[youngDone], h.msgOf[lateDone]}
	for _, id := range gone {
		if _, err := h.s.MessageRead(h.ctx, id); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("message %d survived the purge (err %v)", id, err)
		}
	}
	for _, id := range kept {
		if d, err := h.s.MessageRead(h.ctx, id); err != nil || len(d.Queue) != 1 {
			t.Fatalf("message %d was purged: %+v, %v", id, d, err)
		}
	}
	if _, err := h.s.MessageRead(h.ctx, youngUnrouted[0].MessageID); err != nil {
		t.Fatalf("an unrouted message younger than the cut-off was purged (err %v)", err)
	}
	if res, err := h.s.MessagePurge(h.ctx, storage.MessagePurgeParams{Fence: zero, OlderThan: time.Second}); err != nil || res != (storage.PurgeResult{}) {
		t.Fatalf("second purge: %+v, %v; want nothing", res, err)
	}
	// The limit bounds one call.
	if res, err := h.s.MessagePurge(h.ctx, storage.MessagePurgeParams{Fence: zero, OlderThan: -time.Hour, Limit: 1}); err != nil || res.QueueRows != 1 {
		t.Fatalf("limited purge: %+v, %v; want 1 queue row", res, err)
	}
}

// The recurring sweep re-pends only in-flight rows whose lease has expired.
func testReclaimExpired(t *testing.T, h *harness) {
	live := h.fill(zero, "lab", "1", 1)[0]
	expired := h.fill(zero, "lab", "2", 1)[0]
	pending := h.fill(zero, "lab", "3", 1)[0]
	h.mustClaim(zero, "lab/1", time.Hour, live)
	c := h.mustClaim(zero, "lab/2", 200*time.Millisecond, expired)
	h.waitDBClockPast(*c.Row.LeaseExpiresAt)

	n, err := h.s.QueueReclaimExpired(h.ctx, storage.QueueReclaimExpiredParams{Fence: zero})
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d rows, err %v; want 1", n, err)
	}
	if r := h.queueRow(expired); r.Status != storage.QueuePending || r.LeaseOwner != "" || r.LeaseExpiresAt != nil {
		t.Fatalf("expired row after sweep: %+v", r)
	}
	if r := h.queueRow(live); r.Status != storage.QueueInflight {
		t.Fatalf("live row after sweep: %+v", r)
	}
	if r := h.queueRow(pending); r.Status != storage.QueuePending || r.Attempts != 0 {
		t.Fatalf("pending row after sweep: %+v", r)
	}
}

// Heartbeat inserts and refreshes a node, leave writes a left tombstone, and
// list returns them all with the database clock.
func testNodes(t *testing.T, h *harness) {
	list := func() map[string]storage.Node {
		t.Helper()
		l, err := h.s.NodeList(h.ctx)
		if err != nil {
			t.Fatalf("node list: %v", err)
		}
		if l.DBNow.IsZero() {
			t.Fatal("node list without the database clock")
		}
		m := map[string]storage.Node{}
		for i, n := range l.Nodes {
			if i > 0 && l.Nodes[i-1].NodeID >= n.NodeID {
				t.Fatalf("nodes not ordered by id: %+v", l.Nodes)
			}
			m[n.NodeID] = n
		}
		return m
	}
	if n := list(); len(n) != 0 {
		t.Fatalf("fresh store lists nodes: %+v", n)
	}
	beat := func(id string, leader bool, cfg int64) {
		t.Helper()
		err := h.s.NodeHeartbeat(h.ctx, storage.NodeHeartbeatParams{NodeID: id, Host: "host-" + id, PID: 42, IsLeader: leader, ConfigVersion: cfg})
		if err != nil {
			t.Fatalf("heartbeat %s: %v", id, err)
		}
	}
	beat("a", true, 3)
	beat("b", false, 3)
	first := list()
	a := first["a"]
	if len(first) != 2 || a.Status != storage.NodeActive || !a.IsLeader || a.Host != "host-a" || a.PID != 42 || a.ConfigVersion != 3 || a.StartedAt.IsZero() {
		t.Fatalf("after first beats: %+v", first)
	}
	h.waitDBClockPast(a.LastSeen)
	beat("a", false, 4)
	a2 := list()["a"]
	if !a2.LastSeen.After(a.LastSeen) || !a2.StartedAt.Equal(a.StartedAt) || a2.IsLeader || a2.ConfigVersion != 4 {
		t.Fatalf("second beat: %+v after %+v", a2, a)
	}

	// A new process under the same id whose predecessor crashed (its row
	// still active): its first beat starts the row again.
	h.waitDBClockPast(a2.LastSeen)
	if err := h.s.NodeHeartbeat(h.ctx, storage.NodeHeartbeatParams{NodeID: "a", Host: "host-a", PID: 43, ConfigVersion: 4, Started: true}); err != nil {
		t.Fatalf("first beat of a restarted a: %v", err)
	}
	if a3 := list()["a"]; a3.Status != storage.NodeActive || !a3.StartedAt.After(a2.LastSeen) || a3.PID != 43 {
		t.Fatalf("a restarted after a crash: %+v, want started after %v", a3, a2.LastSeen)
	}

	beat("b", true, 4) // a leader that stops cleanly clears its flag
	if err := h.s.NodeLeave(h.ctx, storage.NodeLeaveParams{NodeID: "b"}); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if b := list()["b"]; b.Status != storage.NodeLeft || b.IsLeader {
		t.Fatalf("left tombstone: %+v", b)
	}
	if err := h.s.NodeLeave(h.ctx, storage.NodeLeaveParams{NodeID: "nobody"}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("leave of an unknown node: want ErrNotFound, got %v", err)
	}
	// The same id coming back is active again, with a new start.
	left := list()["b"]
	h.waitDBClockPast(left.StartedAt)
	beat("b", true, 4)
	if b := list()["b"]; b.Status != storage.NodeActive || !b.IsLeader || !b.StartedAt.After(left.StartedAt) {
		t.Fatalf("revived node: %+v", b)
	}
}

// Each beat records the node's graph config fingerprint, which the next beat
// replaces (a reload changes it); a node that sends none (an older mf) reads
// back as "". The widest fingerprint fits.
func testNodeConfigFingerprint(t *testing.T, h *harness) {
	beat := func(id, fp string) {
		t.Helper()
		err := h.s.NodeHeartbeat(h.ctx, storage.NodeHeartbeatParams{NodeID: id, Host: "host-" + id, PID: 42, ConfigVersion: 1, ConfigFingerprint: fp})
		if err != nil {
			t.Fatalf("heartbeat %s with fingerprint %q: %v", id, fp, err)
		}
	}
	fps := func() map[string]string {
		t.Helper()
		l, err := h.s.NodeList(h.ctx)
		if err != nil {
			t.Fatalf("node list: %v", err)
		}
		m := map[string]string{}
		for _, n := range l.Nodes {
			m[n.NodeID] = n.ConfigFingerprint
		}
		return m
	}
	wide := "v1:" + strings.Repeat("f", storage.MaxConfigFingerprintBytes-3)
	beat("a", "v1:aaaa")
	beat("b", wide)
	beat("c", "")
	if got := fps(); got["a"] != "v1:aaaa" || got["b"] != wide || got["c"] != "" {
		t.Fatalf("fingerprints after first beats: %q", got)
	}
	beat("a", "v1:bbbb") // a reload
	if got := fps()["a"]; got != "v1:bbbb" {
		t.Fatalf("fingerprint of a after a beat with another one: %q, want v1:bbbb", got)
	}
	if err := h.s.NodeLeave(h.ctx, storage.NodeLeaveParams{NodeID: "a"}); err != nil {
		t.Fatal(err)
	}
	beat("a", "v1:cccc") // a tombstone revived takes the new one too
	if got := fps()["a"]; got != "v1:cccc" {
		t.Fatalf("fingerprint of a revived a: %q, want v1:cccc", got)
	}
}

// Each beat records the reload the node failed, if any, and why, which the
// next beat replaces: a reload that works clears them. The widest error
// fits, in characters beyond ASCII too.
func testNodeConfigError(t *testing.T, h *harness) {
	beat := func(failed int64, why string) {
		t.Helper()
		err := h.s.NodeHeartbeat(h.ctx, storage.NodeHeartbeatParams{NodeID: "a", Host: "host-a", PID: 42, ConfigVersion: 3, ConfigFailedVersion: failed, ConfigError: why})
		if err != nil {
			t.Fatalf("heartbeat with failed version %d: %v", failed, err)
		}
	}
	got := func() (int64, string) {
		t.Helper()
		l, err := h.s.NodeList(h.ctx)
		if err != nil || len(l.Nodes) != 1 {
			t.Fatalf("node list: %+v, %v", l, err)
		}
		return l.Nodes[0].ConfigFailedVersion, l.Nodes[0].ConfigError
	}
	beat(0, "")
	if v, why := got(); v != 0 || why != "" {
		t.Fatalf("a node that failed no reload: failed version %d, error %q", v, why)
	}
	wide := strings.Repeat("é", storage.MaxConfigErrorBytes/2) // 2 bytes each
	beat(4, wide)
	if v, why := got(); v != 4 || why != wide {
		t.Fatalf("after a failed reload to version 4: failed version %d, error of %d bytes; want 4 and the %d bytes written", v, len(why), len(wide))
	}
	beat(0, "") // the next reload worked
	if v, why := got(); v != 0 || why != "" {
		t.Fatalf("after a reload that worked: failed version %d, error %q; want none", v, why)
	}
}

// The config version starts at 0 and grows by one per bump, per name.
func testConfigVersion(t *testing.T, h *harness) {
	read := func(name string) int64 {
		t.Helper()
		v, err := h.s.ConfigVersionRead(h.ctx, storage.ConfigVersionReadParams{Name: name})
		if err != nil {
			t.Fatalf("config read %q: %v", name, err)
		}
		return v
	}
	bump := func(name string) int64 {
		t.Helper()
		v, err := h.s.ConfigVersionBump(h.ctx, storage.ConfigVersionBumpParams{Name: name})
		if err != nil {
			t.Fatalf("config bump %q: %v", name, err)
		}
		return v
	}
	if read("") != 0 {
		t.Fatal("fresh config version is not 0")
	}
	if bump("") != 1 || bump(storage.DefaultConfigName) != 2 || read("") != 2 {
		t.Fatal("bumps of the default name did not count 1, 2")
	}
	if read("other") != 0 || bump("other") != 1 || read(storage.DefaultConfigName) != 2 {
		t.Fatal("config names are not independent")
	}
	// Another handle (another node) sees the bump.
	if v, err := h.open().ConfigVersionRead(h.ctx, storage.ConfigVersionReadParams{}); err != nil || v != 2 {
		t.Fatalf("another node reads %d, %v; want 2", v, err)
	}
}

// A secret's first value stays: a later call with another fresh value gets
// the first, from this node, another node and after a restart; each name
// has its own value; a value CheckSecret refuses stores nothing.
func testSecretFirstValueWins(t *testing.T, h *harness) {
	secret := func(s storage.Store, name, fresh string) string {
		t.Helper()
		v, err := s.Secret(h.ctx, name, []byte(fresh))
		if err != nil {
			t.Fatalf("secret %q with fresh %q: %v", name, fresh, err)
		}
		return string(v)
	}
	if got := secret(h.s, "lane_hash", "first"); got != "first" {
		t.Fatalf("the first call got %q, want its own fresh value %q", got, "first")
	}
	if got := secret(h.s, "lane_hash", "second"); got != "first" {
		t.Fatalf("a second call got %q, want the stored %q (not its own fresh value)", got, "first")
	}
	if got := secret(h.s, "other", "own"); got != "own" {
		t.Fatalf("another name got %q, want its own value %q", got, "own")
	}
	// Another handle (another node, or this one restarted) gets the same.
	other := h.open()
	if got := secret(other, "lane_hash", "third"); got != "first" {
		t.Fatalf("another node got %q, want %q", got, "first")
	}
	if got := secret(other, "other", "fourth"); got != "own" {
		t.Fatalf("another node got %q for the other name, want %q", got, "own")
	}
	// Binary values come back byte for byte.
	raw := []byte{0, 0xff, 0x80, '\'', 0, 0x7f}
	if v, err := h.s.Secret(h.ctx, "raw", raw); err != nil || string(v) != string(raw) {
		t.Fatalf("a binary secret came back as %x, %v; want %x", v, err, raw)
	}
	full := []byte(strings.Repeat("k", storage.MaxSecretBytes))
	if v, err := h.s.Secret(h.ctx, strings.Repeat("n", storage.MaxSecretName), full); err != nil || string(v) != string(full) {
		t.Fatalf("a secret of the longest name and value: %d bytes, %v", len(v), err)
	}
	// Refused values store nothing: the name takes a valid value later.
	for _, bad := range [][]byte{nil, {}, make([]byte, storage.MaxSecretBytes+1)} {
		if _, err := h.s.Secret(h.ctx, "empty", bad); err == nil {
			t.Fatalf("a fresh value of %d bytes was accepted", len(bad))
		}
	}
	if _, err := h.s.Secret(h.ctx, "", []byte("x")); err == nil {
		t.Fatal("an empty secret name was accepted")
	}
	if got := secret(h.s, "empty", "valid"); got != "valid" {
		t.Fatalf("after refused values the name got %q, want %q", got, "valid")
	}
}

// Nodes asking for one secret at once, each with its own fresh value, all
// get the same one value, and it is one of theirs.
func testSecretRace(t *testing.T, h *harness) {
	const nodes = 4
	const rounds = 5
	stores := openStores(h.open, nodes)
	for r := 0; r < rounds; r++ {
		name := fmt.Sprintf("race-%d", r)
		got := make([]string, nodes)
		errs := make([]error, nodes)
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := s.Secret(h.ctx, name, []byte(fmt.Sprintf("node-%d", i)))
				got[i], errs[i] = string(v), err
			}()
		}
		wg.Wait()
		for i := range stores {
			if errs[i] != nil {
				t.Fatalf("%s: node %d: %v", name, i, errs[i])
			}
			if got[i] != got[0] {
				t.Fatalf("%s: nodes got different values: %q", name, got)
			}
		}
		if !strings.HasPrefix(got[0], "node-") {
			t.Fatalf("%s: the value %q is none of the fresh values", name, got[0])
		}
	}
}

// A purge past a backlog that cannot be purged yet (a destination blocked:
// its messages, older than the cut-off, have a pending row, and their rows
// to other destinations are finished) deletes the finished rows, the
// messages they leave with no row and the messages never queued, whatever
// the order they came in and the limit of a call, and never a message that
// still has a queue row. The sweeper calls again while a call deletes a
// full batch or says More.
func testPurgeBlockedBacklog(t *testing.T, h *harness) {
	const limit = 3
	ingest := func(status string, dests ...string) storage.IngestedMessage {
		t.Helper()
		m := storage.NewMessage{Inbound: "in", Payload: []byte("MSH|^~\\&|x"), Status: status}
		for _, d := range dests {
			m.Deliveries = append(m.Deliveries, storage.Delivery{Destination: d, Lane: d + "/1"})
		}
		r, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{m}})
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	var blocked, gone []int64
	for i := 0; i < 4*limit; i++ {
		switch i % 4 {
		case 0, 1:
			blocked = append(blocked, ingest(storage.MessageRouted, "lab", "ehr").MessageID)
		case 2:
			gone = append(gone, ingest(storage.MessageRouted, "lab").MessageID)
		case 3:
			gone = append(gone, ingest(storage.MessageUnrouted).MessageID)
		}
	}
	for i := 0; i < 2*limit; i++ {
		gone = append(gone, ingest(storage.MessageRejected).MessageID)
	}
	// lab takes everything; ehr is down.
	for {
		c, err := h.claim(zero, "lab/1", time.Minute)
		if errors.Is(err, storage.ErrNoWork) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		h.complete(zero, c)
	}
	for calls := 0; ; calls++ {
		if calls > 100 {
			t.Fatal("the purge still deletes or says More after 100 calls")
		}
		r, err := h.s.MessagePurge(h.ctx, storage.MessagePurgeParams{Fence: zero, OlderThan: -time.Hour, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if r.QueueRows < limit && r.Messages < limit && !r.More {
			break
		}
	}
	for _, id := range gone {
		if _, err := h.s.MessageRead(h.ctx, id); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("message %d, with no queue row left or never queued, survived the purge (err %v)", id, err)
		}
	}
	for _, id := range blocked {
		d, err := h.s.MessageRead(h.ctx, id)
		if err != nil || len(d.Queue) != 1 || d.Queue[0].Destination != "ehr" || d.Queue[0].Status != storage.QueuePending {
			t.Errorf("blocked message %d after the purge: %+v, %v; want it with its pending ehr row alone", id, d.Queue, err)
		}
	}
}

// Nodes racing to elect, each through its own handle, elect exactly one of
// them, round after round (the winner resigns between rounds, as a clean
// stop does): the term rises by one each round, and every loser is told the
// lease as it stands after its attempt, which names the winner and its term,
// so that a follower waits for the live lease rather than trying again at
// once or taking itself for the leader. Two leaders of one term would both
// pass the fence.
func testRacingElectionsElectOne(t *testing.T, h *harness) {
	const nodes = 4
	const rounds = 5
	stores := openStores(h.open, nodes)
	term := int64(0) // a fresh store's lease has never been held
	for r := 0; r < rounds; r++ {
		leases := make([]storage.Lease, nodes)
		won := make([]bool, nodes)
		errs := make([]error, nodes)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				leases[i], won[i], errs[i] = s.LeaseAttemptElect(h.ctx, storage.LeaseAttemptElectParams{Owner: fmt.Sprintf("node-%d", i), TTL: time.Minute})
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range stores {
			if errs[i] != nil {
				t.Fatalf("round %d: node-%d: %v", r, i, errs[i])
			}
			if won[i] {
				if winner >= 0 {
					t.Fatalf("round %d: node-%d and node-%d were both elected: %+v", r, winner, i, leases)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody was elected: %+v", r, leases)
		}
		w := leases[winner]
		if w.Owner != fmt.Sprintf("node-%d", winner) || w.Term != term+1 || w.Remaining() <= 0 {
			t.Fatalf("round %d: node-%d elected with lease %+v; want its own, term %d, live", r, winner, w, term+1)
		}
		term = w.Term
		for i, l := range leases {
			if i != winner && (l.Owner != w.Owner || l.Term != w.Term || l.Remaining() <= 0) {
				t.Fatalf("round %d: node-%d lost and was told lease %+v; want the winner's, %s at term %d, live", r, i, l, w.Owner, w.Term)
			}
		}
		if l, err := h.s.LeaseRead(h.ctx); err != nil || l.Owner != w.Owner || l.Term != w.Term {
			t.Fatalf("round %d: lease read %+v, %v; want %s at term %d", r, l, err, w.Owner, w.Term)
		}
		if ok, err := stores[winner].LeaseResign(h.ctx, storage.LeaseResignParams{Owner: w.Owner, Term: w.Term}); err != nil || !ok {
			t.Fatalf("round %d: resign of %s at term %d: resigned=%v err=%v", r, w.Owner, w.Term, ok, err)
		}
	}
}

// singleNodeHolder is a store on a database server (PostgreSQL, SQL
// Server), where a single node (cluster disabled) holds its schema's
// single-node lock for its life (cli's mf run takes it so).
type singleNodeHolder interface {
	HoldSingleNode(ctx context.Context) (<-chan error, error)
}

// No node is elected while a single node runs on the schema: the single
// node writes with the zero fence, which holds until someone is elected,
// and a node elected beside it ran its promotion recovery, gave back the
// rows the single node was sending and sent them, and newer ones, while
// the single node still sent its own. Once the single node stops, a node
// is elected. A single node started after that is fenced at its first
// write and does not hold up the leader's renewal, but no other node is
// elected while it runs.
func testNoElectionBesideASingleNode(t *testing.T, h *harness) {
	if _, ok := h.s.(singleNodeHolder); !ok {
		t.Skipf("%s has no single-node lock on a schema: it is never clustered", h.s.Dialect())
	}
	startSingleNode := func() storage.Store {
		t.Helper()
		s := h.open()
		if _, err := s.(singleNodeHolder).HoldSingleNode(h.ctx); err != nil {
			t.Fatalf("a single node takes its lock: %v", err)
		}
		return s
	}
	refused := func(owner string) {
		t.Helper()
		l, ok, err := h.s.LeaseAttemptElect(h.ctx, storage.LeaseAttemptElectParams{Owner: owner, TTL: time.Minute})
		if ok || !errors.Is(err, storage.ErrSingleNodeRunning) {
			t.Fatalf("%s's election while a single node runs: elected=%v err=%v (lease %+v); want ErrSingleNodeRunning", owner, ok, err, l)
		}
	}
	// electedOnceItStops waits for the single node's lock to go with its
	// session, which the server ends a moment after the close.
	electedOnceItStops := func(single storage.Store, owner string) storage.Lease {
		t.Helper()
		single.Close()
		var l storage.Lease
		h.waitFor(owner+"'s election once the single node stopped", 30*time.Second, func() bool {
			var ok bool
			var err error
			l, ok, err = h.s.LeaseAttemptElect(h.ctx, storage.LeaseAttemptElectParams{Owner: owner, TTL: time.Minute})
			if err != nil && !errors.Is(err, storage.ErrSingleNodeRunning) {
				t.Fatalf("%s's election: %v", owner, err)
			}
			return ok
		})
		return l
	}

	single := startSingleNode()
	refused("node-a")
	refused("node-a") // a refusal leaves nothing held
	if l, err := h.s.LeaseRead(h.ctx); err != nil || l.Owner != "" || l.Term != 0 {
		t.Fatalf("lease after refused elections: %+v, %v; want never elected", l, err)
	}
	// The single node's writes, under the zero fence, go through.
	if _, err := single.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{msg("lab", "A")}}); err != nil {
		t.Fatalf("the single node's ingest: %v", err)
	}

	a := electedOnceItStops(single, "node-a")
	if a.Owner != "node-a" || a.Term != 1 {
		t.Fatalf("elected once the single node stopped: %+v; want node-a at term 1", a)
	}

	late := startSingleNode()
	if _, err := late.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{msg("lab", "B")}}); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("the ingest of a single node started after an election: %v; want ErrFenced", err)
	}
	if _, err := h.s.LeaseAttemptRenew(h.ctx, storage.LeaseAttemptRenewParams{Owner: "node-a", Term: 1, TTL: time.Minute}); err != nil {
		t.Fatalf("the leader's renewal while a single node holds its lock: %v", err)
	}
	if ok, err := h.s.LeaseResign(h.ctx, storage.LeaseResignParams{Owner: "node-a", Term: 1}); err != nil || !ok {
		t.Fatalf("the leader's resignation while a single node holds its lock: resigned=%v err=%v", ok, err)
	}
	refused("node-b")
	if b := electedOnceItStops(late, "node-b"); b.Owner != "node-b" || b.Term != 2 {
		t.Fatalf("elected once the second single node stopped: %+v; want node-b at term 2", b)
	}
}

// A payload of 1 MiB and 3 bytes that holds every byte value (NUL, and the
// MLLP frame's 0x0b and 0x1c among them) is stored in a batch with small
// messages and comes back byte for byte: as the message read, the lane's
// claim and an advance's next row, and the small messages on either side
// of it in the batch come back as they were. A lane sends what the claim
// returns: a byte lost, added or transcoded is a message changed on its way
// to the destination.
func testLargeBinaryPayloadRoundTrips(t *testing.T, h *harness) {
	big := make([]byte, 1<<20+3)
	for i := range big {
		big[i] = byte(i)
	}
	large := msg("lab", "P1")
	large.Payload = big
	before, after := msg("lab", "P1"), msg("lab", "P1")
	before.Payload, after.Payload = []byte("MSH|before\r"), []byte("MSH|after\x00\x0b\x1c\r")
	res, err := h.s.MessageIngest(h.ctx, storage.MessageIngestParams{Fence: zero, Messages: []storage.NewMessage{before, large, after}})
	if err != nil {
		t.Fatalf("ingest: %v", err)
	}
	same := func(what string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			at := 0
			for at < len(got) && at < len(want) && got[at] == want[at] {
				at++
			}
			t.Fatalf("%s: %d bytes, want %d; first difference at byte %d", what, len(got), len(want), at)
		}
	}
	for i, m := range []storage.NewMessage{before, large, after} {
		d, err := h.s.MessageRead(h.ctx, res[i].MessageID)
		if err != nil {
			t.Fatalf("read message %d: %v", res[i].MessageID, err)
		}
		same(fmt.Sprintf("message %d read", i), d.Message.Payload, m.Payload)
	}
	q := []int64{res[0].QueueIDs[0], res[1].QueueIDs[0], res[2].QueueIDs[0]}
	first := h.mustClaim(zero, "lab/P1", time.Minute, q[0])
	same("the first message claimed", first.Payload, before.Payload)
	a, err := h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: first.Claim(), Lane: "lab/P1", Owner: solo, LeaseTTL: time.Minute})
	if err != nil || !a.Completed || a.Next == nil || a.Next.Row.ID != q[1] {
		t.Fatalf("advance from row %d: completed %v, next %v, %v; want row %d next", q[0], a.Completed, runIDs(a), err, q[1])
	}
	same("the large message as an advance's next row", a.Next.Payload, big)
	// Given back, it is the lane's head again, for a claim.
	if n, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: zero, Claims: []storage.Claim{a.Next.Claim()}, Lane: "lab/P1"}); err != nil || n != 1 {
		t.Fatalf("give back row %d: %d, %v", q[1], n, err)
	}
	c, err := h.s.QueueClaimNext(h.ctx, storage.QueueClaimNextParams{Fence: zero, Lane: "lab/P1", From: q[0], Owner: solo, LeaseTTL: time.Minute})
	if err != nil || c.Row.ID != q[1] {
		t.Fatalf("claim from row %d: row %d, %v; want row %d", q[0], c.Row.ID, err, q[1])
	}
	same("the large message claimed", c.Payload, big)
	// An advance that claims it in a run, behind the head.
	if n, err := h.s.QueueGiveBack(h.ctx, storage.QueueGiveBackParams{Fence: zero, Claims: []storage.Claim{c.Claim()}, Lane: "lab/P1"}); err != nil || n != 1 {
		t.Fatalf("give back row %d: %d, %v", q[1], n, err)
	}
	a, err = h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: first.Claim(), Lane: "lab/P1", Owner: solo, LeaseTTL: time.Minute, Ahead: 1})
	if err != nil || a.Next == nil || a.Next.Row.ID != q[1] || len(a.Ahead) != 1 || a.Ahead[0].Row.ID != q[2] {
		t.Fatalf("advance with a run: rows %v, %v; want rows %d and %d", runIDs(a), err, q[1], q[2])
	}
	same("the large message as the head of a run", a.Next.Payload, big)
	same("the message after it, in the run", a.Ahead[0].Payload, after.Payload)
	h.complete(zero, *a.Next)
	a, err = h.s.QueueAdvance(h.ctx, storage.QueueAdvanceParams{Fence: zero, Claim: a.Ahead[0].Claim(), Lane: "lab/P1", Owner: solo, LeaseTTL: time.Minute})
	if err != nil || !a.Completed || a.Next != nil {
		t.Fatalf("advance from the last row: completed %v, next %v, %v; want completed, nothing next", a.Completed, runIDs(a), err)
	}
}

// openStores opens n stores with open: the nodes of a test of racing nodes.
func openStores(open func() storage.Store, n int) []storage.Store {
	stores := make([]storage.Store, n)
	for i := range stores {
		stores[i] = open()
	}
	return stores
}
