package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/storage"
)

// A write the server answers with disk_full (SQLSTATE 53100, "could not
// extend file": its disk is full) fails with storage.ErrFull, saying to free
// disk space on the database server, and never as a refusal (which the
// ingest answers AR, the message dropped): the sender gets AE and resends,
// a lane retries its delivery's record. The server's answer is real; a
// trigger raises it, as a full disk would.
func TestADiskFullIsRetriedNotRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := openMigrated(t, ctx, 2)
	ingest := func(id string) error {
		_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Messages: []storage.NewMessage{{
			Inbound: "in", ControlID: id, Payload: []byte("MSH|^~\\&|" + id), Status: storage.MessageRouted,
			Deliveries: []storage.Delivery{{Destination: "d", Lane: "d/x"}},
		}}})
		return err
	}
	if err := ingest("M1"); err != nil {
		t.Fatal(err)
	}
	claim, err := s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Lane: "d/x", Owner: "o", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE FUNCTION mf_test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
		   RAISE EXCEPTION 'could not extend file "base/16384/16402": No space left on device'
		     USING ERRCODE = 'disk_full', HINT = 'Check free disk space.';
		 END $$`,
		`CREATE TRIGGER mf_test_disk_full BEFORE INSERT ON mf_messages FOR EACH ROW EXECUTE FUNCTION mf_test_disk_full()`,
		`CREATE TRIGGER mf_test_disk_full BEFORE UPDATE ON mf_queue FOR EACH ROW EXECUTE FUNCTION mf_test_disk_full()`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	wantFull := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, storage.ErrFull) || errors.Is(err, storage.ErrRefused) ||
			!strings.Contains(err.Error(), "free disk space on the database server") {
			t.Fatalf("%s on a full disk: error %v; want storage.ErrFull, not ErrRefused, saying to free disk space on the database server", what, err)
		}
	}
	wantFull("an ingest", ingest("F1"))
	wantFull("a delivery's record", s.QueueComplete(ctx, storage.QueueCompleteParams{Claim: claim.Claim()}))

	for _, q := range []string{ // space freed
		`DROP TRIGGER mf_test_disk_full ON mf_messages`,
		`DROP TRIGGER mf_test_disk_full ON mf_queue`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := ingest("F1"); err != nil {
		t.Fatalf("the ingest once space is back: %v", err)
	}
	if err := s.QueueComplete(ctx, storage.QueueCompleteParams{Claim: claim.Claim()}); err != nil {
		t.Fatalf("the delivery's record once space is back: %v", err)
	}
}
