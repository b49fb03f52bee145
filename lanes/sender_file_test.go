package lanes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest/logbuf"
	"github.com/messagefoundry/mf/config"
)

// newTestFileSender returns a file sender on dir with the defaults a config
// file gets (create_directory = true).
func newTestFileSender(t *testing.T, dir string) Sender {
	t.Helper()
	return newTestFileSenderOf(t, config.Outbound{Name: "drop", Type: config.OutboundFile, Directory: dir, CreateDirectory: true})
}

func newTestFileSenderOf(t *testing.T, o config.Outbound) Sender {
	t.Helper()
	s, err := NewSender(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// listDir returns the names in dir, hidden ones included.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestFileSenderWritesOneFilePerQueueRow(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "out", "lab") // created on demand
	s := newTestFileSender(t, dir)
	m := testMessage("MSG1")
	if err := s.Send(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "00000000000000000042.hl7"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(m.Payload) {
		t.Errorf("file holds %q", got)
	}
	if names := listDir(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want the message file only (no temporary file left)", names)
	}
	if runtime.GOOS != "windows" {
		fi, _ := os.Stat(filepath.Join(dir, "00000000000000000042.hl7"))
		di, _ := os.Stat(dir)
		if fi.Mode().Perm() != 0o640 || di.Mode().Perm()&0o007 != 0 {
			t.Errorf("file mode %v, directory mode %v: messages are PHI, not world-readable", fi.Mode(), di.Mode())
		}
	}
}

// A redelivery of a row whose file is in place already (the send, or its
// record, lost after the rename; or a directory sync that failed after it)
// finds its own bytes there: delivered, no second file, and the directory
// synced, since the earlier write's sync may never have happened.
func TestFileSenderRedeliveryFindsItsOwnFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileSender(t, dir).(*fileSender)
	var dirSyncs atomic.Int32
	s.syncFile = func(f *os.File) error {
		if fi, err := f.Stat(); err == nil && fi.IsDir() && dirSyncs.Add(1) == 1 {
			return &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.EIO}
		}
		return f.Sync()
	}
	m := testMessage("MSG1")
	wantDeliveryError(t, s.Send(t.Context(), m), false, "syncing directory")
	if err := s.Send(t.Context(), m); err != nil { // the same row, delivered again
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "00000000000000000042.hl7")); string(got) != string(m.Payload) {
		t.Errorf("file holds %q, want the payload exactly", got)
	}
	if names := listDir(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want one file", names)
	}
	if n := dirSyncs.Load(); n != 2 {
		t.Errorf("the directory was synced %d times; want 2: the redelivery must sync it too", n)
	}
}

func TestFileSenderNamesSortInQueueOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileSender(t, dir)
	var wg sync.WaitGroup
	for _, id := range []int64{9, 10, 100, 1, 12345678901234} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := testMessage(fmt.Sprint("C", id))
			m.QueueID = id
			if err := s.Send(t.Context(), m); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	want := []string{"00000000000000000001.hl7", "00000000000000000009.hl7", "00000000000000000010.hl7",
		"00000000000000000100.hl7", "00000012345678901234.hl7"}
	got := listDir(t, dir) // os.ReadDir sorts by name
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("files %v, want %v", got, want)
	}
}

func TestFileSenderFailuresAreRetryable(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	notADir := filepath.Join(base, "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := newTestFileSender(t, filepath.Join(notADir, "sub"))
	err := s.Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, `file drop: writing queue id 42 (control id "MSG1") to `)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = newTestFileSender(t, base).Send(ctx, testMessage("MSG1"))
	wantDeliveryError(t, err, false, "file drop: queue id 42 not written")
	if _, statErr := os.Stat(filepath.Join(base, "00000000000000000042.hl7")); statErr == nil {
		t.Error("a cancelled Send wrote the file")
	}
}

// A crash between writing a message's temporary file and renaming it leaves
// the temporary file: half a message, or all of it, hidden in the
// destination's directory, where no retention ever removes it (PHI). The
// sender removes such leftovers once it starts writing again; the message
// itself is delivered again whole (at least once).
func TestFileSenderRemovesTemporaryFilesACrashLeftBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	leftover := filepath.Join(dir, ".00000000000000000042.hl7.1234567.tmp")
	if err := os.WriteFile(leftover, []byte("MSH|^~\\&|MF|HOSP|LAB|LABFAC|20240115083015||ADT^A01|MSG1|P|2.5.1\rPID|1||123456^^^HOSP^MR||DOE"), 0o640); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(dir, ".pickup.lock") // not the sender's: kept
	if err := os.WriteFile(theirs, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	s := newTestFileSender(t, dir)
	m := testMessage("MSG7")
	m.QueueID = 7
	if err := s.Send(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(listDir(t, dir)), "[.pickup.lock 00000000000000000007.hl7]"; got != want {
		t.Errorf("directory holds %s, want %s (the crashed write's temporary file removed)", got, want)
	}
	// The names it removes are those its writes make, but for its own: a
	// sweep after a write began must not take that write's file away.
	fs := s.(*fileSender)
	other := newTestFileSender(t, dir).(*fileSender)
	var mine, theirsTmp string
	for _, w := range []struct {
		s    *fileSender
		name *string
	}{{fs, &mine}, {other, &theirsTmp}} {
		tmp, err := os.CreateTemp(dir, "."+fileSenderName(42)+"."+w.s.tag+"-*.tmp")
		if err != nil {
			t.Fatal(err)
		}
		tmp.Close()
		*w.name = filepath.Base(tmp.Name())
		if !fileSenderTemp.MatchString(*w.name) {
			t.Errorf("fileSenderTemp does not match %q, a temporary file of the sender", *w.name)
		}
	}
	if !fs.sweep() {
		t.Fatal("sweep could not list the directory")
	}
	if got, want := fmt.Sprint(listDir(t, dir)), fmt.Sprint([]string{mine, ".pickup.lock", "00000000000000000007.hl7"}); got != want {
		t.Errorf("after a sweep, the directory holds %s, want %s (the sender's own write kept, another's leftover removed)", got, want)
	}
}

// A file system that stops answering (a dead NFS server on a hard mount)
// hangs the write: the send must still end within its time, as the Sender
// contract says, retryably, and the message must not turn up later under
// its name once the lane has been told it failed. A send that ignored its
// deadline held its lane, silently, past the row's lease.
func TestFileSenderGivesUpOnAHungFileSystemInTime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileSender(t, dir).(*fileSender)
	hung, release := make(chan struct{}), make(chan struct{})
	s.syncFile = func(f *os.File) error {
		close(hung)
		<-release
		return f.Sync()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- s.Send(ctx, testMessage("MSG1")) }()
	<-hung
	var err error
	select {
	case err = <-result:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatalf("Send still running 10s after its 200ms deadline, with the file system hung; released, it returned %v", <-result)
	}
	wantDeliveryError(t, err, false, `file drop: writing queue id 42 (control id "MSG1") to `)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
	close(release) // the file system comes back: the abandoned write ends
	waitFor(t, "the abandoned write to clean up", func() bool { return len(listDir(t, dir)) == 0 })
}

// The directories a send makes (create_directory) are synced into their
// parents, as the rename is into its directory: only the last directory
// was, and a power cut could take the new ones, with the files counted
// delivered in them.
func TestFileSenderSyncsTheDirectoriesItMakes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "out", "lab")
	s := newTestFileSender(t, dir).(*fileSender)
	var mu sync.Mutex
	synced := map[string]bool{}
	s.syncFile = func(f *os.File) error {
		mu.Lock()
		synced[f.Name()] = true
		mu.Unlock()
		return f.Sync()
	}
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range []string{root, filepath.Join(root, "out"), dir} {
		if !synced[d] {
			t.Errorf("%s was not synced (synced: %v)", d, synced)
		}
	}
}

// A sync of a made directory's parent that fails is tried again at the
// next send: the directory is there by then, and was never made again, so
// its parent went unsynced while the files in it counted delivered.
func TestFileSenderSyncsAMadeDirectorysParentAfterAFailure(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "lab")
	s := newTestFileSender(t, dir).(*fileSender)
	var mu sync.Mutex
	failed, rootSynced := false, false
	s.syncFile = func(f *os.File) error {
		mu.Lock()
		defer mu.Unlock()
		if f.Name() == root {
			if !failed {
				failed = true
				return syscall.EIO
			}
			rootSynced = true
		}
		return f.Sync()
	}
	if err := s.Send(t.Context(), testMessage("MSG1")); err == nil {
		t.Fatal("a send whose directory's parent could not be synced succeeded")
	}
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !rootSynced {
		t.Errorf("%s, which lab was made in, was never synced after its first sync failed", root)
	}
}

// A share's directory that is not there (the share not mounted) must not be
// created on the local disk with create_directory = false: the messages
// written there would reach nobody, each counted as delivered.
func TestFileSenderToldNotToCreateItsDirectoryDoesNot(t *testing.T) {
	t.Parallel()
	mountPoint := t.TempDir() // the share, not mounted: an empty local directory
	dir := filepath.Join(mountPoint, "lab")
	s := newTestFileSenderOf(t, config.Outbound{Name: "drop", Type: config.OutboundFile, Directory: dir})
	err := s.Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, "does not exist and create_directory = false")
	if names := listDir(t, mountPoint); len(names) != 0 {
		t.Errorf("the mount point holds %v: the directory was created on the local disk", names)
	}
	if err := os.Mkdir(dir, 0o750); err != nil { // the share is mounted
		t.Fatal(err)
	}
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatalf("send once the directory is there: %v", err)
	}
}

// Once a file destination has written to its directory, a directory that is
// gone or another one in its place (a share unmounted under a running
// engine: the mount point's own local directory shows through) fails the
// send, retryably, whatever create_directory says: writing there, or making
// the directory again, would count messages delivered that reach nobody.
func TestFileSenderWritesOnlyToTheDirectoryItWroteToBefore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		unmount func(t *testing.T, dir string)
		says    string
	}{
		{"gone", func(t *testing.T, dir string) {
			if err := os.Rename(dir, dir+".away"); err != nil {
				t.Fatal(err)
			}
		}, "is gone"},
		{"another in its place", func(t *testing.T, dir string) {
			if err := os.Rename(dir, dir+".away"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir, 0o750); err != nil {
				t.Fatal(err)
			}
		}, "is not the directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "lab")
			s := newTestFileSender(t, dir)
			if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
				t.Fatal(err)
			}
			tc.unmount(t, dir)
			m := testMessage("MSG2")
			m.QueueID = 43
			err := s.Send(t.Context(), m)
			wantDeliveryError(t, err, false, tc.says)
			if _, statErr := os.Stat(filepath.Join(dir, fileSenderName(43))); statErr == nil {
				t.Errorf("queue id 43 was written to %s, which is not the directory written to before", dir)
			}
			if err := os.RemoveAll(dir); err != nil { // the share comes back
				t.Fatal(err)
			}
			if err := os.Rename(dir+".away", dir); err != nil {
				t.Fatal(err)
			}
			if err := s.Send(t.Context(), m); err != nil {
				t.Fatalf("send once the directory is back: %v", err)
			}
		})
	}
}

// A disk that fills up while a message is written (here at the sync, where a
// file system that allocates late, or NFS, reports it) fails the send,
// retryably, saying where to free space, and leaves nothing in the
// directory: no file under the message's name that a reader would take for
// whole, no hidden part of it (PHI). Once there is space the message is
// written whole.
func TestFileSenderOnAFullDiskLeavesNoFileAndIsRetried(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileSender(t, dir).(*fileSender)
	s.syncFile = func(*os.File) error {
		return &os.PathError{Op: "sync", Path: "the temporary file", Err: syscall.ENOSPC}
	}
	m := testMessage("MSG1")
	err := s.Send(t.Context(), m)
	wantDeliveryError(t, err, false, "free disk space on the file system of "+dir)
	checkNoPayload(t, err)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("error %v does not wrap ENOSPC", err)
	}
	if names := listDir(t, dir); len(names) != 0 {
		t.Fatalf("a send that found the disk full left %v in the directory", names)
	}
	s.syncFile = (*os.File).Sync // space freed
	if err := s.Send(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, fileSenderName(42)))
	if err != nil || string(got) != string(m.Payload) {
		t.Fatalf("the file written once there is space: %q, %v; want the whole message", got, err)
	}
}

// Some file systems cannot sync a directory (fsync of it fails with EINVAL:
// some network and FUSE ones). The message is in place by then, where the
// partner picks it up: reported failed, it was written again at every
// retry, a duplicate each time, and the lane never moved on.
func TestFileSenderOnAFileSystemThatCannotSyncADirectoryDelivers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestFileSender(t, dir).(*fileSender)
	s.syncFile = func(f *os.File) error {
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			return &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.EINVAL}
		}
		return f.Sync()
	}
	m := testMessage("MSG1")
	if err := s.Send(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, fileSenderName(42)))
	if err != nil || string(got) != string(m.Payload) {
		t.Fatalf("the file: %q, %v; want the whole message", got, err)
	}
}

// A destination whose directory is not there at its first send (a share not
// mounted yet at start, with create_directory = false) must still remove
// the temporary files a crash left on the share once it is mounted: the
// first send's sweep found nothing to list, and no later send swept again,
// so the leftovers (PHI) stayed for good.
func TestFileSenderRemovesTheLeftoversOfADirectoryMountedLate(t *testing.T) {
	t.Parallel()
	mountPoint := t.TempDir()
	dir := filepath.Join(mountPoint, "lab")
	s := newTestFileSenderOf(t, config.Outbound{Name: "drop", Type: config.OutboundFile, Directory: dir})
	err := s.Send(t.Context(), testMessage("MSG1"))
	wantDeliveryError(t, err, false, "does not exist and create_directory = false")
	// The share is mounted, with what the crashed process left on it.
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".00000000000000000041.hl7.1234567.tmp"), []byte("MSH|"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(t.Context(), testMessage("MSG1")); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(listDir(t, dir)), "[00000000000000000042.hl7]"; got != want {
		t.Errorf("directory holds %s, want %s (the crashed write's temporary file removed)", got, want)
	}
}

// Queue ids start again with a new store (mf.db deleted, a new cluster
// database), and two nodes with stores of their own may write to one
// directory: a file of the row's name that holds another message is one the
// partner has not picked up yet. Renaming over it lost that message without
// a word; it stays, and the row is written under the next free name.
func TestFileSenderNeverReplacesAnotherFileOfItsName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	taken := filepath.Join(dir, "00000000000000000042.hl7")
	other := []byte("MSH|^~\\&|OTHER|STORE|||20240115083015||ADT^A01|OTHER1|P|2.5.1\r")
	if err := os.WriteFile(taken, other, 0o640); err != nil {
		t.Fatal(err)
	}
	s := newTestFileSender(t, dir).(*fileSender)
	var logs logbuf.Buffer
	s.setLog(zerolog.New(&logs))
	m := testMessage("MSG1")
	for range 2 { // the second a redelivery, which finds its own file
		if err := s.Send(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := os.ReadFile(taken); err != nil || string(got) != string(other) {
		t.Fatalf("%s holds %q (%v) after the send; want the other file's bytes untouched: it was replaced, its message lost", taken, got, err)
	}
	next := filepath.Join(dir, "00000000000000000042-1.hl7")
	if got, err := os.ReadFile(next); err != nil || string(got) != string(m.Payload) {
		t.Errorf("%s holds %q (%v); want the message sent", next, got, err)
	}
	if names := listDir(t, dir); len(names) != 2 {
		t.Errorf("directory holds %v, want the other file and the message", names)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"warn"`) || !strings.Contains(lines[0], `"taken":"`+taken+`"`) ||
		!strings.Contains(lines[0], `"written":"`+next+`"`) || strings.Contains(lines[0], "SECRET") || strings.Contains(lines[0], "OTHER1") {
		t.Errorf("logged %q; want one WARN naming both files and no payload", logs.String())
	}
}

// Names are taken up to a point: past <id>-99.hl7 the send fails, retryably,
// saying what to do, and replaces nothing.
func TestFileSenderGivesUpWhenEveryNameIsTaken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for n := range fileSenderNames {
		name := "00000000000000000042.hl7"
		if n > 0 {
			name = fmt.Sprintf("00000000000000000042-%d.hl7", n)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("other"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	s := newTestFileSender(t, dir)
	wantDeliveryError(t, s.Send(t.Context(), testMessage("MSG1")), false, "have them picked up or moved away")
	if names := listDir(t, dir); len(names) != fileSenderNames {
		t.Errorf("directory holds %d files; want the %d there before, no temporary file left", len(names), fileSenderNames)
	}
}
