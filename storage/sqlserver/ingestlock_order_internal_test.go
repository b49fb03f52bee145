package sqlserver

import (
	"strings"
	"testing"
)

// An operator's resend and resend-dead must not wait for a row lock, nor
// hand rows and payloads to the client, while they hold the ingest lock:
// every ingest of the primary (any node's API may run them) waits for it.
// PostgreSQL locks the rows first and takes the ingest lock last
// (storage/postgres/sql/queue_resend_dead_pick.sql: "before the ingest
// lock (a wait here must not hold up the ingest)"; message_resend_lock.sql).
func TestResendsTakeTheIngestLockAfterTheirRowLocks(t *testing.T) {
	code := func(q string) string { // without comments
		var b strings.Builder
		for _, line := range strings.Split(q, "\n") {
			line, _, _ = strings.Cut(line, "--")
			b.WriteString(line + "\n")
		}
		return b.String()
	}
	pick := code(queries.Get("queue_resend_dead_pick"))
	if a, r := strings.Index(pick, "sp_getapplock"), strings.Index(pick, "UPDLOCK"); a >= 0 && a < r {
		t.Errorf("queue_resend_dead_pick.sql takes the ingest lock (offset %d) before it locks and returns the dead rows with their payloads (offset %d): the lock is then held across row-lock waits, the transfer of up to %d payloads and the Go-side relane, and every ingest waits", a, r, 1000)
	}
	if strings.Contains(code(queries.Get("queue_resend_dead")), "sp_getapplock") == false && strings.Contains(pick, "sp_getapplock") {
		t.Errorf("queue_resend_dead.sql (the insert) does not take the ingest lock itself: it relies on the pick's, held across the round trip")
	}
	resend := code(queries.Get("message_resend"))
	if a, r := strings.Index(resend, "sp_getapplock"), strings.Index(resend, "UPDLOCK"); a >= 0 && a < r {
		t.Errorf("message_resend.sql takes the ingest lock (offset %d) before it waits for the message's row lock (offset %d)", a, r)
	}
}
