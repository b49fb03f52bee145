package listeners

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/lanes"
	"github.com/messagefoundry/mf/storage"
)

// startPoller runs a file inbound polling every 20 ms, and the ingest actor
// it feeds, on st, with no engine around them; extra adds keys to the
// inbound, and afterRead (if not nil) is the poller's hook. It returns the
// inbound directory.
func startPoller(t *testing.T, st storage.Store, extra string, afterRead func(path string)) string {
	t.Helper()
	return startPollerLogging(t, st, extra, afterRead, zerolog.Nop())
}

// startPollerLogging is startPoller with the poller and its ingest actor
// logging to log.
func startPollerLogging(t *testing.T, st storage.Store, extra string, afterRead func(path string), log zerolog.Logger) string {
	t.Helper()
	return startPollerIn(t, st, extra, afterRead, nil, log, t.TempDir())
}

// startPollerListed is startPoller in dir with the poller's listed hook.
func startPollerListed(t *testing.T, st storage.Store, extra string, listed func(path string), dir string) string {
	t.Helper()
	return startPollerIn(t, st, extra, nil, listed, zerolog.Nop(), dir)
}

func startPollerIn(t *testing.T, st storage.Store, extra string, afterRead, listed func(path string), log zerolog.Logger, dir string) string {
	t.Helper()
	cfg, err := config.Parse([]byte(`
[[inbound]]
name = "drop"
type = "file"
directory = "`+filepath.Join(dir, "in")+`"
poll_interval_seconds = 0.02
`+extra+`
[[outbound]]
name = "out"
type = "file"
directory = "`+filepath.Join(dir, "out")+`"

[[route]]
from = "drop"
to = ["out"]
lane_key = "PID-3.1"
`), "mf.toml")
	if err != nil {
		t.Fatal(err)
	}
	router, err := lanes.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sys := actor.NewActorSystem()
	env := &Env{Ctx: ctx, Store: st, Log: log, Router: router, System: sys,
		Lanes: sys.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))}
	env.Ingest = sys.Root.Spawn(NewIngest(env))
	in := cfg.Inbound[0]
	poller := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &FilePoller{env: env, cfg: in, log: env.Log, afterRead: afterRead, listed: listed}
	}))
	t.Cleanup(func() {
		cancel()
		sys.Root.StopFuture(poller).Wait()
		sys.Root.StopFuture(env.Ingest).Wait()
	})
	waitFor(t, "the inbound directory", 5*time.Second, func() bool {
		_, err := os.Stat(in.Directory)
		return err == nil
	})
	return in.Directory
}

// stored lists the stored messages, in store order, as control id and the
// number of OBX segments.
func stored(t *testing.T, st storage.Store) string {
	t.Helper()
	var out []string
	for id := int64(1); ; id++ {
		d, err := st.MessageRead(context.Background(), id)
		if err != nil {
			return strings.Join(out, ",")
		}
		out = append(out, d.Message.ControlID+"/"+strconv.Itoa(strings.Count(string(d.Message.Payload), "OBX")))
	}
}

// drop writes content into the inbound directory under a temporary name,
// then renames it to name.
func drop(t *testing.T, in, name, content string) {
	t.Helper()
	tmp := filepath.Join(in, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(in, name)); err != nil {
		t.Fatal(err)
	}
}

// adt is an ADT^A01 with control id id for patient (as enginetest.ADT,
// which this package's own tests cannot import).
func adt(id, patient string) string {
	return "MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01^ADT_A01|" + id + "|P|2.5.1\r" +
		"EVN|A01|20261121090000\r" +
		"PID|1||" + patient + "^^^HOSP^MR||DOE^JANE||19800101|F\r"
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isArchived(in, name string) bool {
	_, err := os.Stat(filepath.Join(in, "archive", name))
	return err == nil
}

// A file that changed while it was read is read again whole on the next
// poll, even with settle_seconds = 0: what was read may end mid-message.
// Without the check, W1 was stored with one OBX of its two, and the file
// archived.
func TestAFileThatChangedWhileReadIsReadAgain(t *testing.T) {
	st := openSQLite(t)
	rest := "OBX|2|ST|B||second\r" + adt("W2", "P1")
	appended := false
	in := startPoller(t, st, "settle_seconds = 0", func(path string) {
		if appended {
			return
		}
		appended = true // the writer goes on, once
		w, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer w.Close()
		if _, err := w.WriteString(rest); err != nil {
			t.Error(err)
		}
	})
	drop(t, in, "lab.hl7", adt("W1", "P1")+"OBX|1|ST|A||first\r")
	waitFor(t, "lab.hl7 archived", 10*time.Second, func() bool { return isArchived(in, "lab.hl7") })
	if got := stored(t, st); got != "W1/2,W2/0" {
		t.Fatalf("stored %s (control id/OBX count); want W1/2,W2/0", got)
	}
}

// failFirst fails its first MessageIngest call, after a while (a transient
// failure: a dropped connection, a deadlock victim), and passes the others.
type failFirst struct {
	storage.Store
	calls atomic.Int32
}

func (s *failFirst) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	if s.calls.Add(1) == 1 {
		time.Sleep(200 * time.Millisecond) // so that, if it could, a later message would be stored meanwhile
		return nil, errors.New("connection reset")
	}
	return s.Store.MessageIngest(ctx, p)
}

// The messages of a file reach the store in file order even when a
// transaction fails: no later message is stored while an earlier one was
// not, so the file read again stores them in order. Before, the first
// message went alone into a transaction that failed while the next
// transaction stored the other two, and the lane held M2, M3, M1, M2, M3.
func TestAFileIsStoredInOrderWhenATransactionFails(t *testing.T) {
	st := &failFirst{Store: openSQLite(t)}
	in := startPoller(t, st, "settle_seconds = 0", nil)
	drop(t, in, "lab.hl7", adt("M1", "P1")+adt("M2", "P1")+adt("M3", "P1"))
	waitFor(t, "lab.hl7 archived", 10*time.Second, func() bool { return isArchived(in, "lab.hl7") })
	if got := stored(t, st); got != "M1/0,M2/0,M3/0" {
		t.Fatalf("stored %s; want M1/0,M2/0,M3/0 (control id/OBX count), in file order", got)
	}
}

// A file whose store the fence refused, or the end of the term cut off, is
// the normal end of a term, as for an MLLP batch: logged at WARN, saying the
// file stays for the next primary, not at ERROR as a store an operator must
// mend. Before, it was "storing the messages of an inbound file failed" at
// ERROR on every demotion that caught a file.
func TestAFileCutOffByTheEndOfTheTermIsNoError(t *testing.T) {
	for name, failure := range map[string]error{
		"fenced":    storage.ErrFenced,
		"cancelled": fmt.Errorf("%w (%w)", ErrShuttingDown, context.Canceled),
	} {
		t.Run(name, func(t *testing.T) {
			var logs logbuf.Buffer
			st := &scriptedStore{Store: openSQLite(t), fail: map[int]error{1: failure}}
			in := startPollerLogging(t, st, "settle_seconds = 0", nil, zerolog.New(&logs))
			drop(t, in, "lab.hl7", adt("M1", "P1"))
			waitFor(t, "lab.hl7 archived", 10*time.Second, func() bool { return isArchived(in, "lab.hl7") })
			out := logs.String()
			if strings.Contains(out, `"level":"error"`) {
				t.Fatalf("a file cut off by the end of the term was logged at ERROR:\n%s", out)
			}
			if !strings.Contains(out, "the file stays, and the next primary reads it") {
				t.Fatalf("no WARN says the file stays for the next primary:\n%s", out)
			}
			if got := stored(t, st); got != "M1/0" {
				t.Fatalf("stored %s; want M1/0, once, when the file is read again", got)
			}
		})
	}
}

// A transaction ends only between groups: a group that does not fit in what
// is left of one goes whole into the next, and one larger than MaxBatch
// goes whole, alone. Single messages (MLLP) still fill a transaction.
func TestIngestCutsTransactionsOnlyBetweenGroups(t *testing.T) {
	in := &Ingest{}
	group := func(n int) {
		for i := range n {
			in.pending = append(in.pending, queued{more: n - 1 - i})
		}
	}
	group(MaxBatch - 2)
	group(3)
	group(MaxBatch + 5)
	for range MaxBatch + 1 {
		group(1)
	}
	var sizes []int
	for len(in.pending) > 0 {
		sizes = append(sizes, len(in.next()))
	}
	want := []int{MaxBatch - 2, 3, MaxBatch + 5, MaxBatch, 1}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Fatalf("transactions of %v messages; want %v", sizes, want)
	}
}

// A transaction carries at most MaxBatchBytes of messages, unless one
// message or group alone is larger: PostgreSQL refuses a batch of more than
// 1 GB whole.
func TestIngestCutsTransactionsAtMaxBatchBytes(t *testing.T) {
	in := &Ingest{}
	add := func(n, size int) {
		for i := range n {
			in.pending = append(in.pending, queued{Submit: Submit{Msg: storage.NewMessage{Payload: make([]byte, size)}}, more: n - 1 - i})
		}
	}
	const mib = 1 << 20
	for range 100 { // 100 senders of a 10 MiB document
		add(1, 10*mib)
	}
	add(1, MaxBatchBytes+1) // one alone larger than a transaction
	add(3, MaxBatchBytes/2) // a group larger than a transaction, whole
	add(2, 1)
	var sizes []string
	for len(in.pending) > 0 {
		b, total := in.next(), 0
		for _, q := range b {
			total += len(q.Msg.Payload)
		}
		sizes = append(sizes, fmt.Sprintf("%d/%dMiB", len(b), total/mib))
	}
	want := "[6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 6/60MiB 4/40MiB 1/64MiB 3/96MiB 2/0MiB]"
	if got := fmt.Sprint(sizes); got != want {
		t.Fatalf("transactions (messages/size) %s; want %s", got, want)
	}
}

// TestAFailureThatLastsIsLoggedOnceAMinute: a directory that cannot be
// listed fails every poll (every second by default); it is logged at error
// level when it starts, once a minute while it lasts, and when it clears,
// not at every poll.
func TestAFailureThatLastsIsLoggedOnceAMinute(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	f := &FilePoller{
		env: &Env{Ctx: context.Background()},
		cfg: config.Inbound{Name: "drop", Directory: in, ArchiveDirectory: filepath.Join(dir, "archive")},
		log: zerolog.New(&logs).Level(zerolog.InfoLevel),
	}
	for range 5 {
		f.poll()
	}
	if n := strings.Count(logs.String(), "cannot list the file inbound's directory"); n != 1 {
		t.Fatalf("5 polls that could not list the directory logged it %d times, want once:\n%s", n, logs.String())
	}
	f.trouble.logged = time.Now().Add(-troubleRepeat) // a minute on
	f.poll()
	if n := strings.Count(logs.String(), `"polls":6`); n != 1 {
		t.Fatalf("a minute on, the failure is not logged again with its count of polls:\n%s", logs.String())
	}
	if err := os.Remove(in); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(in, 0o750); err != nil {
		t.Fatal(err)
	}
	f.poll()
	f.poll()
	if n := strings.Count(logs.String(), "trouble has cleared"); n != 1 {
		t.Fatalf("the directory listed again: the end of the failure logged %d times, want once:\n%s", n, logs.String())
	}
}

// A limit of the largest int64 reads the whole file: limit+1 overflowed to
// a negative limit, which read nothing, and a file inbound with
// max_file_bytes = 9223372036854775807 (which config now refuses) stored
// nothing and said nothing.
func TestReadAtMostTakesTheLargestLimit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "adt.hl7")
	want := []byte("MSH|^~\\&|A|B|C|D|20240101000000||ADT^A01|C1|P|2.5.1\r")
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{math.MaxInt64, math.MaxInt64 - 1, int64(len(want))} {
		got, err := readAtMost(context.Background(), path, limit, fi)
		if err != nil || string(got) != string(want) {
			t.Errorf("readAtMost(limit %d) = %q, %v; want the file's %d bytes", limit, got, err, len(want))
		}
	}
	if got, err := readAtMost(context.Background(), path, 10, fi); err != nil || len(got) != 11 {
		t.Errorf("readAtMost(limit 10) read %d bytes, %v; want 11 (the limit and one more)", len(got), err)
	}
	// A term that has ended ends the read: a large file on a slow share
	// read to its end held up the graph's stop until root gave the graph
	// up and failed the node.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := readAtMost(ended, path, math.MaxInt64, fi); !errors.Is(err, context.Canceled) || len(got) != 0 {
		t.Errorf("readAtMost after the term ended = %q, %v; want nothing, context.Canceled", got, err)
	}
}

// appendWhileStored appends more to a file the first time messages are
// stored: a writer that goes on after the poller read the file and found it
// unchanged, while its messages are being stored.
type appendWhileStored struct {
	storage.Store
	more string
	path atomic.Pointer[string] // set once the inbound directory is known
	once atomic.Bool
}

func (s *appendWhileStored) MessageIngest(ctx context.Context, p storage.MessageIngestParams) ([]storage.IngestedMessage, error) {
	if s.once.CompareAndSwap(false, true) {
		w, err := os.OpenFile(*s.path.Load(), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		_, err = w.WriteString(s.more)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	return s.Store.MessageIngest(ctx, p)
}

// A file that changes after it was read, while its messages are stored, is
// not archived as it is now: what was added was never read. It is read
// again whole (its first messages stored again: at least once). Before, the
// file went to the archive with W2 in it, and W2 was never stored.
func TestAFileThatChangedWhileStoredIsNotArchivedUnread(t *testing.T) {
	st := &appendWhileStored{Store: openSQLite(t), more: adt("W2", "P1")}
	in := startPoller(t, st, "settle_seconds = 0", nil)
	path := filepath.Join(in, "lab.hl7")
	st.path.Store(&path)
	drop(t, in, "lab.hl7", adt("W1", "P1"))
	waitFor(t, "lab.hl7 archived", 10*time.Second, func() bool { return isArchived(in, "lab.hl7") })
	if got := stored(t, st); got != "W1/0,W1/0,W2/0" {
		t.Fatalf("stored %s (control id/OBX count); want W1/0,W1/0,W2/0 (W1, then the file read again whole)", got)
	}
}

// A file that keeps changing is never settled, however long ago this poller
// first saw it: each change starts its settle_seconds again. Dated in the
// future (its writer's clock ahead of ours), only the poller's own watch
// tells, and a watch kept on the name alone read a file still being written
// once settle_seconds had passed since it first appeared.
func TestAFileThatKeepsChangingNeverSettles(t *testing.T) {
	f := &FilePoller{cfg: config.Inbound{SettleSeconds: 1}}
	t0 := time.Now()
	ahead := t0.Add(time.Hour) // the writer's clock
	for i := range 5 {
		now := t0.Add(time.Duration(i) * 600 * time.Millisecond)
		id := fileID{name: "lab.hl7", size: int64(100 * (i + 1)), mtime: ahead.Add(now.Sub(t0))}
		if f.settled(id, now) {
			t.Fatalf("poll %d at +%v: a file that grew since the last poll is settled; want it read only once it has been unchanged for settle_seconds", i, now.Sub(t0))
		}
	}
	last := fileID{name: "lab.hl7", size: 500, mtime: ahead.Add(2400 * time.Millisecond)}
	if !f.settled(last, t0.Add(2400*time.Millisecond+time.Second)) {
		t.Fatal("a file unchanged for settle_seconds is not settled")
	}
}

// A file put in the place of a listed one as a symbolic link (its writer
// can make one: an SFTP account, a share) is not read: the poller reads
// only regular files, so that the link cannot make mf read, store and
// route a file of its own (a key, another feed's archive) that the link's
// maker may not read. Only the listing skipped links; a link put there
// after it was read through.
func TestALinkPutInPlaceOfAListedFileIsNotRead(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.hl7")
	if err := os.WriteFile(secret, []byte(adt("STOLEN", "P9")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(t.TempDir(), "probe")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	st := openSQLite(t)
	var swapped atomic.Bool
	dir := t.TempDir()
	in := startPollerListed(t, st, "settle_seconds = 0", func(path string) {
		if filepath.Base(path) != "a.hl7" || swapped.Swap(true) {
			return
		}
		if err := os.Remove(path); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(secret, path); err != nil {
			t.Error(err)
		}
	}, dir)
	drop(t, in, "a.hl7", adt("A1", "P1"))
	waitFor(t, "the swap", 10*time.Second, swapped.Load)
	drop(t, in, "b.hl7", adt("B1", "P1"))
	waitFor(t, "b.hl7 archived", 10*time.Second, func() bool { return isArchived(in, "b.hl7") })
	if got := stored(t, st); got != "B1/0" {
		t.Fatalf("stored %s (control id/OBX count); want B1/0: the file the link leads to was read", got)
	}
}

// readAtMost reads only the file it is given: one put in its place since
// it was looked at (a symbolic link to another file, say) is errReplaced.
func TestReadAtMostRefusesAFilePutInItsPlace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path, other := filepath.Join(dir, "adt.hl7"), filepath.Join(dir, "other.hl7")
	for _, p := range []string{path, other} {
		if err := os.WriteFile(p, []byte(adt("C1", "P1")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, path); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if got, err := readAtMost(context.Background(), path, 1<<20, fi); !errors.Is(err, errReplaced) {
		t.Fatalf("readAtMost of a link put in the file's place: %d bytes, %v; want errReplaced", len(got), err)
	}
}
