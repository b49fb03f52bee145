package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A single node on PostgreSQL whose lock another process took while its
// session was down stops without draining: its delivery in hand is
// abandoned at once, as on a demotion. It drained, as a clean stop does
// (up to the destination's timeout and the drain timeout), while the other
// process, which had re-pended that row in its promotion recovery, sent it
// and newer ones: the late send landed behind them.
func TestASingleNodeWhoseLockWasTakenStopsWithoutDraining(t *testing.T) {
	url := pgtest.NewSchema(t)
	received, closed := make(chan struct{}, 1), make(chan struct{})
	// The destination reads the message and never answers.
	dest := enginetest.ServeTCP(t, func(c net.Conn) {
		var got []byte
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			got = append(got, buf[:n]...)
			if bytes.Contains(got, []byte{0x1c, 0x0d}) {
				select {
				case received <- struct{}{}:
				default:
				}
			}
			if err != nil {
				close(closed)
				return
			}
		}
	})
	in, api := enginetest.FreeAddr(t), enginetest.FreeAddr(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "mf.toml")
	cfg := "[store]\nbackend = \"postgres\"\npool_size = 3\nurl = \"" + url + "\"\n" +
		"[api]\nlisten = \"" + api + "\"\n" +
		"[[inbound]]\nname = \"adt_in\"\ntype = \"mllp\"\nlisten = \"" + in + "\"\n" +
		"[[outbound]]\nname = \"lab\"\ntype = \"mllp\"\naddress = \"" + dest + "\"\ntimeout_seconds = 50\n" +
		"[[route]]\nfrom = \"adt_in\"\nto = [\"lab\"]\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runErr error
	stopped := make(chan struct{})
	logs := &enginetest.LogBuffer{}
	go func() {
		defer close(stopped)
		runErr = App(io.Discard, logs).RunContext(ctx, []string{"mf", "run", "--config", path, "--drain-timeout", "50s"})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(90 * time.Second):
			t.Errorf("mf run did not stop within 90s of its cancellation")
		}
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	enginetest.WaitFor(t, "the single node to open its port", 60*time.Second, func() bool { return dialable(in) })
	if ack := enginetest.Dial(t, in).Send(enginetest.ADT("C1", "P1")); ack.Code != "AA" {
		t.Fatalf("the message was answered %s", ack.Code)
	}
	select {
	case <-received:
	case <-time.After(30 * time.Second):
		t.Fatal("the destination did not receive the message")
	}

	// Its lock session ends (as at a restart of the database) and another
	// process takes the lock before the node looks again.
	other, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	enginetest.WaitFor(t, "another session to take the single node's lock", 30*time.Second, func() bool {
		if _, err := other.Exec(context.Background(), takeOverLock); err != nil {
			t.Fatal(err)
		}
		var took bool
		if err := other.QueryRow(context.Background(), "SELECT pg_try_advisory_lock(1835401217, hashtext(current_schema()))").Scan(&took); err != nil {
			t.Fatal(err)
		}
		return took
	})

	// Well within the destination's timeout and the drain timeout.
	select {
	case <-stopped:
		if !errors.Is(runErr, storage.ErrSingleNodeTaken) {
			t.Fatalf("mf run returned %v; want ErrSingleNodeTaken", runErr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("mf run did not stop within 20s of another process taking its lock: it drained its delivery in hand")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the delivery in hand was not abandoned: the destination's connection is still open")
	}
}

// takeOverLock ends the session holding the single-node lock of the
// connection's schema (storage/postgres's single_node_lock.sql), if any.
const takeOverLock = `SELECT pg_terminate_backend(l.pid)
  FROM pg_locks AS l
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
   AND l.classid = 1835401217
   AND l.objid::bigint = (hashtext(current_schema())::bigint & 4294967295)
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.pid <> pg_backend_pid()`
