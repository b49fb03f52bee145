package sqlserver

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// A purge call gives each of its statements at most storage.PurgeChunk rows, each
// in a transaction of its own: the sweeper's 10,000 rows in one transaction
// held their locks and the fence's shared lock, which an election waits for
// (and before migration 0012 the leader's renewal too), for the whole call.
func TestAPurgeDeletesInTransactionsOfAThousandRows(t *testing.T) {
	d := &fakeDriver{}
	db := sql.OpenDB(fakeConnector{d: d})
	defer db.Close()
	s := &Store{db: db, lease: db}
	const limit = 5000
	if _, err := s.MessagePurge(context.Background(), storage.MessagePurgeParams{
		Fence: storage.Fence{Owner: "node-a", Term: 3}, OlderThan: time.Hour, Limit: limit,
	}); err != nil {
		t.Fatal(err)
	}
	purges := 0
	for _, c := range d.calls {
		if !strings.HasPrefix(c.name, "message_purge_") {
			continue
		}
		purges++
		for i, a := range c.args {
			if n, _ := c.values[i].(int64); a == "limit" && n > 1000 {
				t.Errorf("%s.sql was given @limit %d in one transaction (a call of %d), want at most 1000", c.name, n, limit)
			}
		}
	}
	if purges == 0 {
		t.Fatal("MessagePurge ran no message_purge_ statement")
	}
}
