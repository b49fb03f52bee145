package lanes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/noreplace"
)

// File permissions of what the file sender creates: messages are PHI, so
// nothing is world-readable; the group may read (a pick-up process).
const (
	fileSenderDirMode  = 0o750
	fileSenderFileMode = 0o640
)

// fileSender writes each message to its own file in a directory (DESIGN §7).
//
// The file is named after the queue row, <queue id, 20 digits>.hl7, so the
// names sort in FIFO order. It never replaces a file (see place): a file of
// that name holding the same bytes is the row's own earlier write (a
// redelivery, at least once), and the row counts delivered without a
// duplicate; one holding other bytes is another message (queue ids start
// again with a new store, and two nodes with stores of their own may share
// the directory), which the partner may not have picked up yet, and the row
// goes under the next free name, <id>-<n>.hl7, with a WARN. A file appears
// whole or not at all: the message is written to a hidden temporary file in
// the same directory, synced, renamed into place, and the directory synced,
// so that neither a reader nor a crash ever sees half a message. A crash
// before the rename leaves the hidden temporary file: the first Send that
// can list the directory removes such leftovers (the messages they hold
// are delivered again). Its own temporary files carry the sender's tag, so
// that a sweep that comes after its first writes leaves them alone.
//
// A message written where its reader does not look counts as delivered and
// reaches nobody, so the sender is careful with its directory, which is
// often a share: it creates the directory only when create_directory allows
// and it has not written to it yet, and once it has, it writes only to that
// same directory (os.SameFile). A share unmounted under it leaves either
// nothing at the path or the mount point's own local directory, and both
// fail the send, retryably, until the share is back.
type fileSender struct {
	name, dir string
	create    bool
	timeout   time.Duration
	tag       string // in the names of this sender's temporary files
	sweepMu   sync.Mutex
	swept     bool // a sweep has listed the directory
	mu        sync.Mutex
	home      os.FileInfo // the directory first written to; nil before
	// unsynced are directories that made ones were created in and whose
	// sync has not yet worked (makeDirectory): tried again at each send
	// until it does, since the directory is there by then.
	unsynced []string
	// syncFile is (*os.File).Sync, of the temporary file and of the
	// directory; a test makes it hang as a dead file server does.
	syncFile func(*os.File) error
	log      zerolog.Logger // the destination's; see place
}

// fileSenderNames is how many names place tries for a message, its own
// and <id>-1.hl7 to <id>-99.hl7, before it gives up (retryably).
const fileSenderNames = 100

// fileSenderTemp matches the names of the file sender's temporary files,
// with a sender's tag (16 hex digits) or without (the names of earlier
// versions).
var fileSenderTemp = regexp.MustCompile(`^\.[0-9]{20}\.hl7\.(?:[0-9a-f]{16}-)?[0-9]+\.tmp$`)

func newFileSender(o config.Outbound) (*fileSender, error) {
	if o.Directory == "" {
		return nil, errors.New("directory: required for type = \"file\"")
	}
	return &fileSender{name: o.Name, dir: o.Directory, create: o.CreateDirectory, timeout: sendTimeout(o),
		tag: fmt.Sprintf("%016x", rand.Uint64()), syncFile: (*os.File).Sync, log: zerolog.Nop()}, nil
}

// setLog gives the sender the logger of its destination (see place).
func (s *fileSender) setLog(log zerolog.Logger) { s.log = log }

// fileSenderName is the name the file sender gives the message of queue row id.
func fileSenderName(queueID int64) string { return fmt.Sprintf("%020d.hl7", queueID) }

// Send implements Sender. Every failure is retryable (a full disk, a missing
// permission, an unmounted share may all be fixed).
//
// A file system can hang (a dead NFS server on a hard mount) and a system
// call cannot be interrupted: the write runs on its own goroutine, and Send
// gives up when ctx ends, as the Sender contract says. The abandoned write
// then removes its temporary file instead of renaming it into place, so a
// send reported failed does not put its file in place long after (only one
// renaming as the time ran out can).
func (s *fileSender) Send(ctx context.Context, m Outgoing) error {
	if err := ctx.Err(); err != nil {
		return retryableError(err, "file %s: queue id %d not written", s.name, m.QueueID)
	}
	ctx, cancel := withSendDeadline(ctx, s.timeout)
	defer cancel()
	final := filepath.Join(s.dir, fileSenderName(m.QueueID))
	done := make(chan error, 1)
	go func() {
		// Until a sweep could list the directory: one that could not (a
		// share not mounted yet) left the leftovers there.
		s.sweepMu.Lock()
		if !s.swept {
			s.swept = s.sweep()
		}
		s.sweepMu.Unlock()
		done <- s.write(ctx, final, m)
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done: // finished as time ran out
		default:
			return retryableError(context.Cause(ctx), "file %s: writing queue id %d (control id %q) to %s did not finish in time (is the file system hung?); given up, to be written again", s.name, m.QueueID, m.ControlID, final)
		}
	}
	if errors.Is(err, ErrDistrusted) {
		return distrusted("file", s.name, m)
	}
	if diskFull(err) {
		return retryableError(err, "file %s: writing queue id %d (control id %q) to %s failed: the disk is full, free disk space on the file system of %s", s.name, m.QueueID, m.ControlID, final, s.dir)
	}
	if err != nil {
		return retryableError(err, "file %s: writing queue id %d (control id %q) to %s failed", s.name, m.QueueID, m.ControlID, final)
	}
	return nil
}

// write puts m's payload in place as final (or final's next free name, see
// place), unless ctx ends before the rename.
func (s *fileSender) write(ctx context.Context, final string, m Outgoing) (err error) {
	// Send may have given up while this waited for the sweep (a hung file
	// system): a write started now would only write the payload, sync it
	// and remove it again.
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, err := s.directory()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, "."+filepath.Base(final)+"."+s.tag+"-*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(fileSenderFileMode); err != nil {
		return err
	}
	if _, err = tmp.Write(m.Payload); err != nil {
		return err
	}
	if err = s.syncFile(tmp); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = ctx.Err(); err != nil {
		return err // Send has given up: the message must not appear now
	}
	if !m.mayWrite() {
		return ErrDistrusted
	}
	if err = s.place(tmp.Name(), final, m); err != nil {
		return err
	}
	if err = s.syncDir(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.home == nil {
		s.home = dir
	}
	s.mu.Unlock()
	return nil
}

// place moves tmp, which holds m's payload, to final, never over a file
// already there: a rename replaced it, and a message the partner had not
// picked up yet was lost without a word. A file of the name that holds the
// same bytes is this row's own earlier write (the send, or its record,
// lost to a crash after the rename): tmp goes, and the row counts
// delivered. One that holds other bytes (or cannot be read) is another
// message, and m goes under the next free name, <id>-<n>.hl7, each looked
// at the same way, so that a redelivery finds its own file there too.
func (s *fileSender) place(tmp, final string, m Outgoing) error {
	name := final
	for n := 1; ; n++ {
		err := noreplace.Move(tmp, name)
		if err == nil {
			if name != final {
				s.log.Warn().Int64("queue_id", m.QueueID).Str("control_id", m.ControlID).Str("taken", final).Str("written", name).
					Msg("file name taken by another file (a store started afresh, so that queue ids count again, or another writer in the directory): it is left as it is, and the message written under the next free name")
			}
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		if sameContent(name, m.Payload) {
			if err := os.Remove(tmp); err != nil {
				return fmt.Errorf("%s already holds this message (an earlier write of it); removing the temporary file: %w", name, err)
			}
			return nil
		}
		if n == fileSenderNames {
			return fmt.Errorf("%s and the names after it up to %s are all taken by files of other messages (a store started afresh, or another writer in the directory): have them picked up or moved away", final, name)
		}
		name = strings.TrimSuffix(final, ".hl7") + fmt.Sprintf("-%d.hl7", n)
	}
}

// sameContent reports whether the file at path holds exactly want; false
// when it cannot be read.
func sameContent(path string, want []byte) bool {
	// Looked at before it is opened: opening a FIFO to read blocks until a
	// writer comes, so one at the name held every send until its time ran
	// out, for ever, each leaving its temporary file and a thread behind;
	// and a symbolic link to the same bytes elsewhere is not this row's
	// write. O_NONBLOCK and O_NOFOLLOW for what is swapped in between.
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|noBlockNoFollow, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(want)) {
		return false
	}
	got, err := io.ReadAll(io.LimitReader(f, int64(len(want))+1))
	return err == nil && bytes.Equal(got, want)
}

// directory returns the directory to write to, after checking that it is
// the one written to before, if any, and creating it if it may.
func (s *fileSender) directory() (os.FileInfo, error) {
	s.mu.Lock()
	home := s.home
	s.mu.Unlock()
	fi, err := os.Stat(s.dir)
	switch {
	case home != nil && errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("directory %s is gone (is its share unmounted? was it removed?): a directory already written to is not made again, so put it back, or restart mf run to make it afresh", s.dir)
	case home != nil && err == nil && !os.SameFile(home, fi):
		return nil, fmt.Errorf("directory %s is not the directory this destination wrote to before (is its share unmounted, so that the mount point shows? was it replaced?): mount the share again, or restart mf run to write to the new directory", s.dir)
	case errors.Is(err, fs.ErrNotExist) && !s.create:
		return nil, fmt.Errorf("directory %s does not exist and create_directory = false (is its share mounted?)", s.dir)
	case errors.Is(err, fs.ErrNotExist):
		if err := s.makeDirectory(); err != nil {
			return nil, err
		}
		fi, err = os.Stat(s.dir)
	}
	if err == nil {
		err = s.syncMade()
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", s.dir)
	}
	return fi, nil
}

// sweep removes the temporary files an earlier process left in the
// directory when it stopped between writing one and renaming it: each holds
// some or all of a message (PHI), which no retention would ever remove.
// The sender's own (its tag in their names) are writes in progress. Best
// effort: a failure here must not hold up deliveries; false when the
// directory could not be listed, to try again at the next send.
func (s *fileSender) sweep() bool {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		name := e.Name()
		if e.Type().IsRegular() && fileSenderTemp.MatchString(name) && !strings.Contains(name, "."+s.tag+"-") {
			_ = os.Remove(filepath.Join(s.dir, name))
		}
	}
	return true
}

// makeDirectory makes s.dir and the directories above it that are missing,
// and syncs the parent of each it made: a directory's entry is durable only
// once its parent is synced, and the rename's sync of s.dir alone (syncDir)
// left a power cut free to take the new directories, and the files counted
// delivered in them, on a file system that does not commit a parent's entry
// with its child's.
func (s *fileSender) makeDirectory() error {
	var made []string // the missing ones, deepest first
	for d := s.dir; ; {
		if _, err := os.Stat(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		made = append(made, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := os.MkdirAll(s.dir, fileSenderDirMode); err != nil {
		return err
	}
	s.mu.Lock()
	for _, d := range made {
		s.unsynced = append(s.unsynced, filepath.Dir(d))
	}
	s.mu.Unlock()
	return nil
}

// syncMade syncs the directories that directories were made in
// (makeDirectory), deepest first, and forgets each once synced. A parent
// this process cannot open (write and search only) cannot be synced by it
// and is forgotten: a failed send at each retry would not change that.
func (s *fileSender) syncMade() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.unsynced) > 0 {
		err := s.syncPath(s.unsynced[0])
		if err != nil && !errors.Is(err, fs.ErrPermission) {
			return err
		}
		s.unsynced = s.unsynced[1:]
	}
	return nil
}

// syncDir makes a rename in the directory durable.
func (s *fileSender) syncDir() error { return s.syncPath(s.dir) }

// syncPath syncs the directory dir. Windows cannot sync a directory (and
// does not need to).
func (s *fileSender) syncPath(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// A file system that cannot sync a directory is no failure: the
	// message is in place already, and a send reported failed would put it
	// there again at every retry, each time for the partner to pick up.
	if err := s.syncFile(d); err != nil && !cannotSyncDir(err) {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// Close implements Sender; the file sender holds nothing open.
func (s *fileSender) Close() error { return nil }
