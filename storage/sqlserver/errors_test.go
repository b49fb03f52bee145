package sqlserver

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/messagefoundry/mf/storage"
)

// The error numbers the dialect acts on are found in the error itself and in
// every message of its batch (mssql.Error.All), through wrapping: checked
// offline, as no SQL Server runs here.
func TestErrorNumbersAreFoundInTheWholeBatch(t *testing.T) {
	batch := func(first int32, rest ...int32) error {
		e := mssql.Error{Number: first}
		for _, n := range rest {
			e.All = append(e.All, mssql.Error{Number: n})
		}
		return fmt.Errorf("exec: %w", e)
	}
	if !isDeadlock(batch(errDeadlock)) || !isDeadlock(batch(3621, errIngestLockDeadlock)) || isDeadlock(batch(2627)) {
		t.Error("isDeadlock")
	}
	if !isDuplicateKey(batch(3621, errDuplicateIndexKey)) || isDuplicateKey(batch(errDeadlock)) || isDuplicateKey(errors.New("x")) {
		t.Error("isDuplicateKey")
	}
	if err := refusal(batch(3621, 8152)); !errors.Is(err, storage.ErrRefused) || err.Error() != "storage: the database refused a value of the write (SQL Server error 8152)" {
		t.Errorf("refusal of a truncation: %v", err)
	}
	if err := refusal(batch(errDuplicateKey)); err != nil {
		t.Errorf("refusal of a duplicate key: %v; want none (the database's state, not the message)", err)
	}
}

// A write SQL Server answers for want of space (a full filegroup, 1101 and
// 1105; a full transaction log, 9002) fails with storage.ErrFull, saying
// where to free space, and is never a refusal: the sender gets AE and
// resends, a lane retries its delivery's record. Checked offline, as no SQL
// Server runs here.
func TestAFullDatabaseIsRetriedNotRefused(t *testing.T) {
	for _, n := range []int32{1101, 1105, 9002} {
		err := wrap("message ingest", fmt.Errorf("exec: %w", mssql.Error{Number: 3621, All: []mssql.Error{{Number: n}}}))
		if !errors.Is(err, storage.ErrFull) || refusal(err) != nil || !strings.Contains(err.Error(), "free space on the database server") {
			t.Errorf("SQL Server error %d: %v (refusal %v); want storage.ErrFull, no refusal, saying to free space on the database server", n, err, refusal(err))
		}
	}
	if err := wrap("message ingest", mssql.Error{Number: errDeadlock}); errors.Is(err, storage.ErrFull) {
		t.Errorf("a deadlock: %v; want no ErrFull", err)
	}
}
