package sqlserver

import (
	"regexp"
	"strings"
	"testing"
)

// Once a resend or a resend-dead holds the ingest lock, every ingest of
// the primary waits for its commit: from there it must wait for no other
// session's row. So after sp_getapplock its statements take no row lock of
// their own choosing (UPDLOCK, HOLDLOCK: those come before, on the rows it
// then marks), and each one that reads or writes mf_queue goes by primary
// key (FORCESEEK): a scan would take locks on other rows, the lanes' among
// them, and wait for them. The inserts draw their ids under the lock (the
// lane claim's FIFO argument, (b)), checked by
// TestStatementsKeepTheFenceTheLaneOrderAndTheDatabaseClock. Checked
// offline, as no SQL Server runs here.
func TestResendsWaitForNoRowUnderTheIngestLock(t *testing.T) {
	fromQueue := regexp.MustCompile(`(?is)\b(FROM|JOIN)\s+mf_queue\b(\s+AS\s+\w+)?(\s+WITH\s*\(([^)]*)\))?`)
	for _, name := range []string{"message_resend", "queue_resend_dead"} {
		code := lineComment.ReplaceAllString(queries.Get(name), "")
		i := strings.Index(code, "sp_getapplock")
		if i < 0 {
			t.Errorf("%s.sql takes no ingest lock", name)
			continue
		}
		locked := code[i:]
		if m := regexp.MustCompile(`(?i)\b(UPDLOCK|HOLDLOCK|XLOCK|TABLOCKX?|SERIALIZABLE)\b`).FindString(locked); m != "" {
			t.Errorf("%s.sql waits for a lock (%s) while it holds the ingest lock: every ingest waits with it", name, m)
		}
		for _, m := range fromQueue.FindAllStringSubmatch(locked, -1) {
			if !strings.Contains(strings.ToUpper(m[4]), "FORCESEEK") {
				t.Errorf("%s.sql: %q under the ingest lock may scan mf_queue and wait for other sessions' rows; want FORCESEEK", name, strings.Join(strings.Fields(m[0]), " "))
			}
		}
	}
}
