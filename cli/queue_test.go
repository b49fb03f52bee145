package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage"
)

// blockedLaneNode is apiNode with an inbound whose route sends to outbound
// ehr, an HTTP destination that refuses POISON (a permanent failure) and
// blocks the lane on it, lanes by PID-3.1; it returns the engine, the API's
// base URL, the destination and a client of the inbound.
func blockedLaneNode(t *testing.T) (*enginetest.Engine, string, *enginetest.HTTPDestination, *enginetest.Client) {
	t.Helper()
	dest := enginetest.StartHTTPDestination(t)
	e, url, cl := httpLaneNode(t, dest.URL, `on_exhausted = "block"`)
	return e, url, dest, cl
}

// httpLaneNode is apiNode with an inbound whose route sends to outbound
// ehr, an HTTP destination at destURL with the keys of more besides, lanes
// by PID-3.1; it returns the engine, the API's base URL and a client of
// the inbound.
func httpLaneNode(t *testing.T, destURL, more string) (*enginetest.Engine, string, *enginetest.Client) {
	t.Helper()
	listen := enginetest.FreeAddr(t)
	e, url := apiNodeWith(t, `
[[inbound]]
name = "in"
type = "mllp"
listen = "`+listen+`"

[[outbound]]
name = "ehr"
type = "http"
url = "`+destURL+`"
`+more+`

[[route]]
from = "in"
to = ["ehr"]
lane_key = "PID-3.1"

`)
	return e, url, enginetest.Dial(t, listen)
}

// poison is an ADT of control id id for patient P1 that the destination
// refuses while its Reject is set.
func poison(id string) string {
	return strings.Replace(enginetest.ADT(id, "P1"), "DOE^JANE", enginetest.RejectedPatient, 1)
}

// waitBlocked waits until lane ehr/P1 is blocked and returns its head's
// queue id.
func waitBlocked(t *testing.T, e *enginetest.Engine) int64 {
	t.Helper()
	return waitHead(t, e, "lane ehr/P1 to be blocked", storage.LaneSummary.Blocked)
}

// waitHead waits until is holds for lane ehr/P1 (what names the wait, as
// for WaitFor) and returns its head's queue id.
func waitHead(t *testing.T, e *enginetest.Engine, what string, is func(storage.LaneSummary) bool) int64 {
	t.Helper()
	var head int64
	enginetest.WaitFor(t, what, 10*time.Second, func() bool {
		ls, err := e.Store.QueueLanes(context.Background(), storage.QueueLanesParams{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Lane == "ehr/P1" && is(l) {
				head = l.Head.ID
				return true
			}
		}
		return false
	})
	return head
}

// blockLane sends poisoned (refused: it blocks lane ehr/P1) and behind it
// an ADT of control id behind through cl, and returns the blocked head's
// queue id.
func blockLane(t *testing.T, e *enginetest.Engine, cl *enginetest.Client, poisoned, behind string) int64 {
	t.Helper()
	cl.Send(poison(poisoned))
	cl.Send(enginetest.ADT(behind, "P1"))
	return waitBlocked(t, e)
}

// asOperatorOf makes the mf commands the test runs call the API at url
// with the operator's token.
func asOperatorOf(t *testing.T, url string) {
	t.Setenv(TokenEnv, apiTokens["operator"])
	t.Setenv("MF_API", url)
}

// queueRow is queue row id as the store has it.
func queueRow(t *testing.T, e *enginetest.Engine, id int64) storage.QueueRow {
	t.Helper()
	for _, m := range e.Messages(t) {
		for _, q := range m.Queue {
			if q.ID == id {
				return q
			}
		}
	}
	t.Fatalf("no queue row %d in the store", id)
	return storage.QueueRow{}
}

// Operators had only curl for POST /queue/{id}/retry and /skip, to act on
// a blocked lane's head: mf lanes names the blocked head and the commands,
// mf skip sets it aside as dead and the lane moves on, mf retry makes it
// due now with a fresh set of attempts and the lane sends it in its turn;
// each says in a line what happened to the row.
func TestRetryAndSkipABlockedHead(t *testing.T) {
	e, url, dest, cl := blockedLaneNode(t)
	asOperatorOf(t, url)
	head := blockLane(t, e, cl, "B1", "B2")
	id := strconv.FormatInt(head, 10)
	out, err := runMF(t, "lanes")
	if err != nil || !strings.Contains(out, "blocked") ||
		!strings.Contains(out, "\nlane ehr/P1 is blocked at queue row "+id+": mf retry --api "+url+" "+id+" sends it again, mf skip --api "+url+" "+id+" sets it aside as dead\nlast page\n") {
		t.Fatalf("mf lanes with lane ehr/P1 blocked at row %d: %v, printed\n%s\nwant the commands that act on its head", head, err, out)
	}
	if out, err := runMF(t, "lanes", "--json"); err != nil || strings.Contains(out, "mf retry") {
		t.Fatalf("mf lanes --json: %v, printed\n%s\nwant the API's page as it is", err, out)
	}

	out, err = runMF(t, "skip", id)
	if want := "queue row " + id + " skipped: it is set aside as dead (its message is kept), and its lane moves on to the row behind it, if any\n"; err != nil || out != want {
		t.Fatalf("mf skip %d: %v, printed %q; want %q", head, err, out, want)
	}
	enginetest.WaitFor(t, "the lane to move on to B2", 10*time.Second, func() bool { return strings.Join(dest.Received(), ",") == "B2" })
	if r := queueRow(t, e, head); r.Status != storage.QueueDead || !strings.Contains(r.LastError, "skipped by operator operator-token") {
		t.Fatalf("row %d after mf skip: %s, %q; want dead, skipped by the operator's token", head, r.Status, r.LastError)
	}
	if _, err := runMF(t, "skip", id); err == nil || !strings.Contains(err.Error(), "409 Conflict: queue row "+id+" is dead (finished)") {
		t.Fatalf("mf skip %d again: %v; want the API's 409, the row is dead", head, err)
	}

	head = blockLane(t, e, cl, "B3", "B4")
	id = strconv.FormatInt(head, 10)
	before := queueRow(t, e, head)
	// Held, so that the lane sends nothing while the row is looked at.
	if _, err := runMF(t, "hold", "ehr"); err != nil {
		t.Fatal(err)
	}
	out, err = runMF(t, "retry", id)
	if want := "queue row " + id + " retried: it is due now, with a fresh set of attempts, and its lane sends it in its turn (once no row is ahead of it, and while its outbound is not held)\n"; err != nil || out != want {
		t.Fatalf("mf retry %d: %v, printed %q; want %q", head, err, out, want)
	}
	r := queueRow(t, e, head)
	if r.Status != storage.QueuePending || r.Held || r.Attempts != before.Attempts || r.NextAttemptAt.After(time.Now()) {
		t.Fatalf("row %d after mf retry: %s, held %v, %d attempts, next attempt at %v; want pending, not held, due now, its %d attempts still counted",
			head, r.Status, r.Held, r.Attempts, r.NextAttemptAt, before.Attempts)
	}
	out, err = runMF(t, "retry", "--json", id)
	if want := "{\n  \"action\": \"retry\",\n  \"id\": " + id + "\n}\n"; err != nil || out != want {
		t.Fatalf("mf retry --json %d: %v, printed %q; want the API's answer %q", head, err, out, want)
	}
	dest.Reject.Store(false)
	if _, err := runMF(t, "release", "ehr"); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "the lane to send B3, then B4", 10*time.Second, func() bool { return strings.Join(dest.Received(), ",") == "B2,B3,B4" })
	if r := queueRow(t, e, head); r.Status != storage.QueueDone {
		t.Fatalf("row %d after mf retry and mf release: %s; want done", head, r.Status)
	}
}

// mf retry and mf skip refuse, sending nothing, an id that is missing, not
// a positive integer or not alone, and fail, exit non-zero, with the API's
// words on any answer but 200: no such row, a row behind its lane's head or
// finished, a token whose role may not, a node that is not there.
func TestRetryAndSkipRefusals(t *testing.T) {
	e, url, _, cl := blockedLaneNode(t)
	head := blockLane(t, e, cl, "B1", "B2")
	id, behind := strconv.FormatInt(head, 10), strconv.FormatInt(head+1, 10)
	// Every request that reaches a server here is counted: a refusal of
	// the argument must send none.
	unavailable, asked := answering(t, http.StatusServiceUnavailable, "store: queue skip failed: database is locked; it may have been applied")
	nobody := "http://" + enginetest.FreeAddr(t)
	checkRefusals(t, []refusal{
		{"no such row", apiTokens["operator"], []string{"retry", "--api", url, "999999"},
			[]string{"POST " + url + "/queue/999999/retry: 404 Not Found: no queue row 999999"}},
		{"no such row, skip", apiTokens["operator"], []string{"skip", "--api", url, "999999"},
			[]string{"404 Not Found: no queue row 999999"}},
		{"behind the head", apiTokens["operator"], []string{"skip", "--api", url, behind},
			[]string{"409 Conflict: queue row " + behind + " is pending but is not the head of its lane: row " + id + " is ahead of it"}},
		{"no token", "", []string{"retry", "--api", url, id},
			[]string{"401 Unauthorized", "set " + TokenEnv + " to a token of role operator or admin"}},
		{"viewer", apiTokens["viewer"], []string{"skip", "--api", url, id},
			[]string{"403 Forbidden", "lacks QUEUE_WRITE", "mf skip needs a token of role operator or admin"}},
		{"unavailable", apiTokens["operator"], []string{"skip", "--api", unavailable, id},
			[]string{"503 Service Unavailable: store: queue skip failed: database is locked; it may have been applied"}},
		{"no node", apiTokens["operator"], []string{"retry", "--api", nobody, id},
			[]string{"POST " + nobody + "/queue/" + id + "/retry", "connection refused", "no API answers at " + nobody}},
		{"no argument", apiTokens["operator"], []string{"retry", "--api", unavailable},
			[]string{"mf retry needs the id of a queue row", "mf retry [--api URL] QUEUE_ID"}},
		{"two arguments", apiTokens["operator"], []string{"skip", "--api", unavailable, id, behind},
			[]string{"mf skip takes one queue id", `"` + id + `", "` + behind + `"`, "retry or skip one row at a time"}},
		{"a flag after the id", apiTokens["operator"], []string{"retry", id, "--api", unavailable},
			[]string{"mf retry takes one queue id", "flags go before the queue id"}},
		{"not a number", apiTokens["operator"], []string{"retry", "--api", unavailable, "ehr/P1"},
			[]string{`mf retry: queue id "ehr/P1" is not a positive integer`}},
		{"zero", apiTokens["operator"], []string{"skip", "--api", unavailable, "0"},
			[]string{`mf skip: queue id "0" is not a positive integer`}},
		{"a sign", apiTokens["operator"], []string{"skip", "--api", unavailable, "+" + id},
			[]string{`mf skip: queue id "+` + id + `" is not a positive integer`}},
		{"past int64", apiTokens["operator"], []string{"retry", "--api", unavailable, "9223372036854775808"},
			[]string{`mf retry: queue id "9223372036854775808" is not a positive integer`}},
		{"empty", apiTokens["operator"], []string{"retry", "--api", unavailable, ""},
			[]string{`mf retry: the queue id is empty`}},
	})
	if n := asked.Load(); n != 1 {
		t.Errorf("the server that answers 503 was asked %d times; want once, by the one case that calls it", n)
	}
	if r := queueRow(t, e, head); r.Status != storage.QueuePending || !r.Held {
		t.Fatalf("row %d after the refusals: %s, held %v; want still the blocked head", head, r.Status, r.Held)
	}
	if r := queueRow(t, e, head+1); r.Status != storage.QueuePending {
		t.Fatalf("row %d after the refusals: %s; want still pending behind the head", head+1, r.Status)
	}
}

// An operator's skip moves a blocked lane on when the API answers, not at
// the lane manager's next rescan: the queue's version is frozen once the
// manager has caught up with the blocked head, so that no rescan lists the
// lanes (as with a long rescan interval) before the next full one, 30 s
// away; the row behind the head must be delivered well within that.
func TestASkipMovesTheLaneOnWhenTheAPIAnswers(t *testing.T) {
	e, url, dest, cl := blockedLaneNode(t)
	asOperatorOf(t, url)
	head := blockLane(t, e, cl, "S1", "S2")
	e.Store.ManagerCaughtUp(t)
	e.Store.FreezeQueueVersion(t)
	if _, err := runMF(t, "skip", strconv.FormatInt(head, 10)); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "S2 delivered after the skip, with no rescan to list the lanes", 10*time.Second,
		func() bool { return strings.Join(dest.Received(), ",") == "S2" })
}

// An operator's retry of a head backing off (retry_base_seconds of ten
// minutes) has its lane send it when the API answers, and only then the
// row behind it: the queue's version is frozen, as above, so that no
// rescan finds the head due again before the next full one, 30 s away.
func TestARetrySendsABackingOffHeadWhenTheAPIAnswers(t *testing.T) {
	var (
		refuse atomic.Bool
		mu     sync.Mutex
		got    []string
	)
	refuse.Store(true)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() {
			w.WriteHeader(http.StatusServiceUnavailable) // retried, after the backoff
			return
		}
		mu.Lock()
		got = append(got, r.Header.Get("X-MF-Control-ID"))
		mu.Unlock()
	}))
	t.Cleanup(dest.Close)
	received := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(got, ",")
	}
	e, url, cl := httpLaneNode(t, dest.URL, "retry_base_seconds = 600\nretry_max_seconds = 600")
	asOperatorOf(t, url)
	cl.Send(enginetest.ADT("R1", "P1"))
	cl.Send(enginetest.ADT("R2", "P1"))
	head := waitHead(t, e, "lane ehr/P1's head to back off", func(l storage.LaneSummary) bool {
		return l.Head.Status == storage.QueuePending && l.Head.Attempts > 0
	})
	e.Store.ManagerCaughtUp(t)
	e.Store.FreezeQueueVersion(t)
	refuse.Store(false)
	if _, err := runMF(t, "retry", strconv.FormatInt(head, 10)); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "R1 then R2 delivered after the retry, with no rescan to list the lanes", 10*time.Second,
		func() bool { return received() == "R1,R2" })
}
