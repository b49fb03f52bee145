package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/messagefoundry/mf/storage"
)

// The ingest refuses a message (AR, not sent again) only for what the
// database says of its own rows; what comes of the database's state would
// meet every message alike and is an error the sender resends through (AE).
// A lane's write, which is only tried again, also fails alone for a unique
// violation or a corrupt page, but never for the fence or the connection.
func TestWhatTheIngestRefusesAndWhatFailsALaneAlone(t *testing.T) {
	for _, c := range []struct {
		code          string
		refused, lone bool
	}{
		{"22001", true, true},  // a value too long
		{"23502", true, true},  // NOT NULL
		{"23503", true, true},  // an operator's foreign key
		{"23514", true, true},  // CHECK
		{"54000", true, true},  // an index row too large
		{"P0001", true, true},  // an operator's trigger raising
		{"23505", false, true}, // a sequence behind its table
		{"XX001", false, true}, // a corrupt page
		{"2200H", false, false},
		{"MF001", false, false}, // the fence
		{"40P01", false, false}, // a deadlock, run again
		{"53100", false, false}, // disk full
		{"57P01", false, false}, // the server shutting down
		{"42501", false, false}, // a privilege revoked
	} {
		err := fmt.Errorf("insert: %w", &pgconn.PgError{Code: c.code})
		if got := refusal(err); errors.Is(got, storage.ErrRefused) != c.refused {
			t.Errorf("SQLSTATE %s: ingest refusal %v; want refused %v", c.code, got, c.refused)
		}
		w := &laneWrite{lane: "d/x"}
		if got, _ := failedAlone(&writeError{w: w, err: err}); (got == w) != c.lone {
			t.Errorf("SQLSTATE %s: a lane's write fails alone %v; want %v", c.code, got == w, c.lone)
		}
	}
}
