package sqlserver

import (
	"errors"
	"fmt"
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
