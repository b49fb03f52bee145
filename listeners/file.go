package listeners

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
)

type poll struct{}

// FilePoller is the inbound of type file: it polls a directory, ingests every
// message of each file, and only once they are all committed moves the file
// to the archive directory. It lives in the graph, so only the leader polls
// a shared directory. A crash between commit and move re-ingests the file
// (at least once).
//
// Files are read in name order, and a file that cannot be finished holds up
// the later ones: they may carry later messages of the same lanes.
type FilePoller struct {
	env   *Env
	cfg   config.Inbound
	log   zerolog.Logger
	timer scheduler.CancelFunc
	// drained: the graph is stopping; no file is read any more (Drain).
	drained bool

	// unarchived is the file whose messages are all stored but whose move
	// to the archive failed (zero: none). Polls only retry its move until
	// it succeeds, the file changes or it is gone: reading it again would
	// store its messages again.
	unarchived fileID
	// settling is the first file not yet settled, and since when this
	// poller has seen it unchanged.
	settling      fileID
	settlingSince time.Time
	// held is the last file held for an operator (larger than
	// max_file_bytes, or holding a message larger than max_message_bytes),
	// so that it is logged once, not on every poll.
	held       fileID
	heldReason string
	// trouble is the failure the last polls ran into, logged when it
	// starts, at most once a troubleRepeat while it lasts, and when it clears.
	trouble trouble

	// afterRead, if not nil, is called between reading a file and checking
	// that it did not change meanwhile (tests change it there).
	afterRead func(path string)
	// listed, if not nil, is called between listing a file as regular and
	// reading it (tests put another in its place there).
	listed func(path string)
}

// fileID is what the poller knows of a file: the same name with another size
// or modification time is another file.
type fileID struct {
	name  string
	size  int64
	mtime time.Time
	info  fs.FileInfo // for os.SameFile
}

func idOf(name string, fi fs.FileInfo) fileID {
	return fileID{name: name, size: fi.Size(), mtime: fi.ModTime(), info: fi}
}

// is compares the file system's identity too (device and inode): a file
// put in the place of another of the same size, with the same modification
// time (a coarse clock, cp -p, rsync -t), is another file; taken for the
// one whose messages are stored, it would be archived unread.
func (id fileID) is(other fileID) bool {
	return id.name == other.name && id.size == other.size && id.mtime.Equal(other.mtime) &&
		(id.info == nil || other.info == nil || os.SameFile(id.info, other.info))
}

// NewFilePoller returns the props of a file inbound actor.
func NewFilePoller(env *Env, cfg config.Inbound) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &FilePoller{env: env, cfg: cfg, log: env.Log.With().Str("inbound", cfg.Name).Logger()}
	})
}

// Receive implements actor.Actor.
func (f *FilePoller) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		for _, dir := range []string{f.cfg.Directory, f.cfg.ArchiveDirectory} {
			_, err := os.Stat(dir)
			if err == nil {
				continue
			}
			if !errors.Is(err, fs.ErrNotExist) {
				// Not "missing": making it would not help, and polling says
				// what fails each time (logged once a minute).
				f.log.Error().Err(err).Str("directory", dir).Msg("cannot look at the file inbound's directory (permissions? a stale share?); polling anyway")
				continue
			}
			if !f.cfg.CreateDirectory {
				f.log.Error().Str("directory", dir).Msg("the file inbound's directory is not there and create_directory = false, so it is not made: " +
					"mount its share (or make it); the poller reads nothing from it, and archives nothing into it, until it is there")
				continue
			}
			if err := os.MkdirAll(dir, 0o750); err != nil {
				f.log.Error().Err(err).Str("directory", dir).Msg("cannot create the file inbound's directory; polling anyway")
				continue
			}
			// Right on a fresh install; on a share that is not mounted,
			// a local directory that stays empty (or keeps the archive
			// where nobody looks): the operator must hear of it.
			f.log.Warn().Str("directory", dir).Msg("the file inbound's directory was not there and was made (mode 0750); if it should be on a share, the share is not mounted: mount it (the poller reads whatever is at the path)")
		}
		f.timer = scheduler.NewTimerScheduler(ctx).SendRepeatedly(0, f.cfg.PollInterval(), ctx.Self(), poll{})
	case poll:
		if !f.drained {
			f.poll()
		}
	case Drain:
		// A poll runs whole within the actor, so none is under way: the
		// messages of the last file read are stored and the file archived.
		f.drained = true
		if f.timer != nil {
			f.timer()
		}
		ctx.Respond(Drained{})
	case *actor.Stopping, *actor.Restarting:
		if f.timer != nil {
			f.timer()
		}
	}
}

func (f *FilePoller) poll() {
	troubled := f.trouble.polls
	defer func() {
		if f.trouble.what != "" && f.trouble.polls == troubled && f.env.Ctx.Err() == nil {
			f.log.Info().Str("trouble", f.trouble.what).Int("polls", f.trouble.polls).
				Msg("the file inbound's trouble has cleared")
			f.trouble = trouble{}
		}
	}()
	if f.unarchived.name != "" && !f.retryArchive() {
		return
	}
	entries, err := os.ReadDir(f.cfg.Directory)
	if err != nil {
		f.troubled("listing the directory").Err(err).Str("directory", f.cfg.Directory).
			Msg("cannot list the file inbound's directory (it must be a directory this process can read); no file is read until it can")
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		name := e.Name()
		// Hidden and temporary names are files still being written; so
		// may be others, which settled and ingestFile tell.
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tmp") {
			continue
		}
		if f.env.Ctx.Err() != nil {
			return
		}
		if f.listed != nil {
			f.listed(filepath.Join(f.cfg.Directory, name))
		}
		if !f.ingestFile(name) {
			return // keep order: later files wait for this one
		}
	}
}

// settled reports whether a file has stopped changing: its modification
// time is settle_seconds old, or this poller has seen it unchanged that long
// (a writer whose clock is ahead of ours puts it in the future).
func (f *FilePoller) settled(id fileID, now time.Time) bool {
	settle := f.cfg.Settle()
	if settle <= 0 || now.Sub(id.mtime) >= settle {
		return true
	}
	if !f.settling.is(id) {
		f.settling, f.settlingSince = id, now
		return false
	}
	return now.Sub(f.settlingSince) >= settle
}

// waiting notes, at debug level on every poll, which file holds up the
// later ones and why; what an operator must act on is logged once, higher.
func (f *FilePoller) waiting(name, reason string) {
	f.log.Debug().Str("file", name).Str("reason", reason).Msg("an inbound file holds up the later ones")
}

// ingestFile stores every message of one file and archives it; false when
// the file must be tried again.
func (f *FilePoller) ingestFile(name string) bool {
	path := filepath.Join(f.cfg.Directory, name)
	// Lstat, and the read below takes only the file it finds: a link put
	// in the place of the listed file (whoever writes the directory can
	// make one) would have mf read a file of its own, which the link's
	// maker may not read, and store and route it.
	fi, err := os.Lstat(path)
	if err != nil {
		f.troubled("reading "+name).Err(err).Str("file", name).
			Msg("cannot read an inbound file; no later file is read until it can (will retry)")
		return false
	}
	if !fi.Mode().IsRegular() {
		f.waiting(name, "not a regular file (a symbolic link?): not read, as the listing leaves such names")
		return true
	}
	// On Windows, Lstat's FileInfo reads the file's id from the path only
	// when first compared (os/types_windows.go, loadFileId): read it now,
	// before the open, or a file put in its place meanwhile would be
	// compared with itself below. Unix's Lstat has it already.
	os.SameFile(fi, fi)
	id := idOf(name, fi)
	if !f.settled(id, time.Now()) {
		f.waiting(name, "settling")
		return false
	}
	// Held for an operator and unchanged since: reading it again would
	// come to the same end, reading, copying and splitting up to
	// max_file_bytes every poll, all night. A changed file (size, time or
	// inode) is another, and read; a reload starts a new poller.
	if f.held.is(id) {
		f.waiting(name, f.heldReason)
		return false
	}
	// Not read: it could run the process out of memory, on every new
	// leader, since it stays in the directory.
	if id.size > f.cfg.MaxFileBytes {
		f.hold(id, "larger than max_file_bytes", func() {
			f.log.Error().Str("file", name).Int64("bytes", id.size).Int64("max_file_bytes", f.cfg.MaxFileBytes).
				Msg("an inbound file is larger than max_file_bytes: it is not read, and no later file is read until it is gone " +
					"(raise max_file_bytes if it is legitimate, or move the file out of the directory)")
		})
		return false
	}
	b, err := readAtMost(f.env.Ctx, path, f.cfg.MaxFileBytes, fi)
	if errors.Is(err, errReplaced) {
		f.waiting(name, "replaced while read")
		return false
	}
	if err != nil && f.env.Ctx.Err() != nil {
		// The term ended (a stop, a reload, a loss) while a large file was
		// read: the read gives up, the file stays for the next read, and
		// the graph's stop does not wait out the rest of it.
		f.waiting(name, "the term ended while it was read")
		return false
	}
	if err != nil {
		f.troubled("reading "+name).Err(err).Str("file", name).
			Msg("cannot read an inbound file; no later file is read until it can (will retry)")
		return false
	}
	if f.afterRead != nil {
		f.afterRead(path)
	}
	// A writer that went on while the file was read: what was read may end
	// mid-message, and would be stored as a whole message.
	if after, err := os.Lstat(path); err != nil || !id.is(idOf(name, after)) || int64(len(b)) != id.size {
		f.waiting(name, "changed while read")
		return false
	}
	msgs := SplitMessages(b)
	// A message too large to store holds the file, as a file too large to
	// read does: dropped, nobody would hear of it (a file's writer gets no
	// AR), and an operator can raise the limit or take the file out.
	if i, size, over := f.oversize(msgs); over {
		f.hold(id, "a message larger than max_message_bytes", func() {
			countRejected(f.cfg.Name, reasonOversize)
			f.log.Error().Str("file", name).Int("message", i+1).Int("messages", len(msgs)).Int("bytes", size).
				Int("max_message_bytes", f.cfg.MaxMessageBytes).
				Msg("a message of an inbound file is larger than max_message_bytes: nothing of the file is stored, and no later file is read until it is gone " +
					"(raise max_message_bytes if it is legitimate, or move the file out of the directory)")
		})
		return false
	}
	var rejected rejects
	for start := 0; start < len(msgs); start += MaxBatch {
		err := f.store(msgs[start:min(start+MaxBatch, len(msgs))], &rejected)
		if errors.Is(err, storage.ErrFenced) || errors.Is(err, ErrShuttingDown) {
			// The normal end of a term, not a store to mend.
			f.log.Warn().Err(err).Str("file", name).
				Msg("an inbound file was not stored: this node stopped leading (or is stopping); the file stays, and the next primary reads it")
			return false
		}
		if err != nil {
			f.troubled("storing "+name).Err(err).Str("file", name).
				Msg("storing the messages of an inbound file failed; the file stays and is read again")
			return false
		}
	}
	// A writer that went on while the messages were stored: archived now,
	// what it added would never be read. Read again whole, the file's
	// first messages are stored twice (at least once), none lost.
	if after, err := os.Stat(path); err == nil && !id.is(idOf(name, after)) {
		f.log.Warn().Str("file", name).Int("messages", len(msgs)).
			Msg("an inbound file changed while its messages were stored: it is not archived, and is read again whole once it settles, so its messages stored so far are stored again " +
				"(have its writer write under a temporary name, starting with . or ending in .tmp, and rename it when done)")
		return false
	}
	archived, err := f.archive(name)
	if err != nil {
		f.unarchived = id
		f.log.Error().Err(err).Str("file", name).Str("archive_directory", f.cfg.ArchiveDirectory).
			Msg("cannot move an ingested file to the archive: its messages are stored, and no later file is read until it moves " +
				"(archive_directory must be a writable directory on the same file system as directory; or move the file away by hand)")
		return false
	}
	f.log.Info().Str("file", name).Str("archived_as", archived).Int("messages", len(msgs)).Msg("inbound file ingested and archived")
	if rejected.n > 0 {
		// A file's writer hears no AR: this line is all that tells of them.
		f.log.Warn().Str("file", name).Str("archived_as", archived).Int("messages", len(msgs)).Int("rejected", rejected.n).
			Int64("message_id", rejected.firstID).Str("reason", rejected.firstReason).
			Msg("messages of an inbound file are rejected (not HL7 v2, no control ID (MSH-10), or a processing ID, MSH-11, other than the inbound's processing_id): kept as rejected, not delivered (GET /messages/{id}; message_id and reason are the first one's); ask the file's writer to fix them")
	}
	return true
}

// utf8BOM is the byte order mark some Windows programs put before text.
var utf8BOM = []byte("\xEF\xBB\xBF")

// rejects counts the messages of a file stored as rejected (not HL7 v2,
// without a control ID, or of another processing ID), and keeps the first
// one's id and reason.
type rejects struct {
	n           int
	firstID     int64
	firstReason string
}

// hold keeps a file, and the later ones, waiting for an operator; tell, which
// says what to do, runs once for each file held, not on every poll.
func (f *FilePoller) hold(id fileID, reason string, tell func()) {
	if !f.held.is(id) {
		f.held, f.heldReason = id, reason
		tell()
	}
	f.waiting(id.name, reason)
}

// troubleRepeat is how often a failure that lasts is logged again: a poll
// every second (the default) would otherwise log it 86,400 times a day.
const troubleRepeat = time.Minute

// trouble is a failure that comes back at every poll until something is
// fixed: a directory that cannot be listed, a file that cannot be read,
// a store that is down.
type trouble struct {
	what   string    // what failed ("" for nothing)
	logged time.Time // when it was last logged at error level
	polls  int       // polls that ran into it
}

// troubled returns the event to log a failure with: at error level when
// the failure is new, or troubleRepeat has passed since it was last logged
// (with how many polls it has lasted), else at debug level.
func (f *FilePoller) troubled(what string) *zerolog.Event {
	now := time.Now()
	t := &f.trouble
	if t.what == what && now.Sub(t.logged) < troubleRepeat {
		t.polls++
		return f.log.Debug()
	}
	if t.what != what {
		*t = trouble{what: what}
	}
	t.polls++
	t.logged = now
	return f.log.Error().Int("polls", t.polls)
}

// errReplaced is readAtMost's error for a path that no longer names the
// file it was asked to read.
var errReplaced = errors.New("the file was replaced")

// readAtMost reads the file at path, but no more than limit+1 bytes of it (a
// file that grew past the limit since it was stat'ed then reads longer than
// its size), and only if it is want, the file lstat found there (else
// errReplaced): never what a link put in its place leads to. limit+1 stops
// at the largest int64: it overflowed to a negative limit, which reads
// nothing (config bounds max_file_bytes well below it).
func readAtMost(ctx context.Context, path string, limit int64, want fs.FileInfo) ([]byte, error) {
	r, err := openListed(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if got, err := r.Stat(); err != nil {
		return nil, err
	} else if !got.Mode().IsRegular() || !os.SameFile(got, want) {
		// Regular too: a file made in the place of one removed may have
		// its inode number, which is all SameFile compares.
		return nil, errReplaced
	}
	if limit < math.MaxInt64 {
		limit++
	}
	return io.ReadAll(ctxReader{ctx, io.LimitReader(r, limit)})
}

// ctxReader is r that fails once ctx has ended: io.ReadAll of a file of up
// to max_file_bytes (512 MiB at most) on a slow share could outlast the
// graph's stop, which gives up a graph still running 10 s past the drain
// timeout and fails the node (root.graphStuck).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// oversize finds the first message larger than max_message_bytes: its
// index and size.
func (f *FilePoller) oversize(msgs [][]byte) (int, int, bool) {
	for i, raw := range msgs {
		if len(raw) > f.cfg.MaxMessageBytes {
			return i, len(raw), true
		}
	}
	return 0, 0, false
}

// archive moves a file whose messages are all stored to the archive
// directory, beside any earlier file of the same name (archiveFile), and
// returns its name there.
func (f *FilePoller) archive(name string) (string, error) {
	return archiveFile(filepath.Join(f.cfg.Directory, name), f.cfg.ArchiveDirectory, name)
}

// retryArchive tries again to move the file whose messages are stored but
// whose move failed; true once the later files may be read. A file changed
// since (its size or modification time) is another file: it is read again.
func (f *FilePoller) retryArchive() bool {
	u := f.unarchived
	fi, err := os.Stat(filepath.Join(f.cfg.Directory, u.name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.unarchived = fileID{}
		f.log.Warn().Str("file", u.name).Msg("the ingested file that could not be archived is gone (moved by hand?); reading the later files")
		return true
	case err == nil && !u.is(idOf(u.name, fi)):
		f.unarchived = fileID{}
		f.log.Warn().Str("file", u.name).Msg("the ingested file that could not be archived has changed since: it is read again as a new file")
		return true
	case err == nil:
		_, err = f.archive(u.name)
	}
	if err != nil {
		f.waiting(u.name, "archive move failing")
		return false
	}
	f.unarchived = fileID{}
	f.log.Info().Str("file", u.name).Msg("the ingested file that could not be archived is archived now; reading the later files")
	return true
}

// store has messages of a file stored, in order, as one SubmitGroup, and
// waits for them all: the next group is sent only once this one is stored,
// so that when one fails, no later message of the file is stored before
// the file is read again. The error is the first failure that is not a
// refusal. The messages stored as rejected (not HL7 v2) are counted in
// rejected.
func (f *FilePoller) store(msgs [][]byte, rejected *rejects) error {
	reply := make(chan Result, len(msgs))
	g := SubmitGroup{Submits: make([]Submit, len(msgs))}
	reasons := make([]string, len(msgs)) // why each is rejected, if it is
	for i, raw := range msgs {
		countReceived(f.cfg.Name)
		var m storage.NewMessage
		m, reasons[i] = f.newMessage(raw)
		g.Submits[i] = Submit{Msg: m, Reply: reply}
	}
	f.env.System.Root.Send(f.env.Ingest, g)
	var failed error
	// The ingest answers a group's Submits in their order (Ingest.flush).
	for i, s := range g.Submits {
		r, _ := f.env.await(reply, nil)
		if r.Err == nil && s.Msg.Status == storage.MessageUnrouted {
			countUnrouted(f.cfg.Name)
			// As over MLLP (conn.handle): DEBUG, since a filter may drop a
			// message type by design.
			f.log.Debug().Int64("message_id", r.MessageID).Str("control_id", s.Msg.ControlID).
				Msg("no route matches the message: stored as unrouted")
		}
		if r.Err == nil && s.Msg.Status == storage.MessageRejected {
			countRejected(f.cfg.Name, reasons[i])
			if rejected.n == 0 {
				rejected.firstID, rejected.firstReason = r.MessageID, s.Msg.Error
			}
			rejected.n++
		}
		switch {
		case errors.Is(r.Err, storage.ErrRefused):
			// Kept as rejected (the ingest logged it); the file's bytes
			// go to the archive all the same.
			countRejected(f.cfg.Name, reasonRefused)
		case r.Err != nil && failed == nil:
			failed = r.Err
		}
	}
	return failed
}

// newMessage is the message to store for raw, and reason why it is
// rejected (a mf_messages_rejected_total reason), if it is.
func (f *FilePoller) newMessage(raw []byte) (m storage.NewMessage, reason string) {
	msg, err := hl7.Parse(raw)
	if err != nil {
		// Counted once stored (store): a file read again after a failed
		// store would count it again. Its control id, when MSH-1 alone
		// finds it, is kept as over MLLP (conn.handle): the operator
		// traces the message to its writer by it.
		return storage.NewMessage{Inbound: f.cfg.Name, ControlID: hl7.UnparsableControlID(raw), Payload: raw,
			Status: storage.MessageRejected, Error: err.Error()}, reasonParse
	}
	if r := refusalOf(f.cfg, msg); r.err != nil {
		return storage.NewMessage{Inbound: f.cfg.Name, ControlID: msg.ControlID(), MessageType: msg.MessageType(), Payload: raw,
			Status: storage.MessageRejected, Error: r.err.Error()}, r.reason
	}
	d := f.env.Router.Route(f.cfg.Name, msg)
	status := storage.MessageRouted
	if len(d) == 0 {
		status = storage.MessageUnrouted
	}
	return storage.NewMessage{Inbound: f.cfg.Name, ControlID: msg.ControlID(), MessageType: msg.MessageType(),
		Payload: raw, Status: status, Deliveries: d}, ""
}

// SplitMessages cuts a file into its HL7 messages: each MSH segment starts
// one. Batch envelope segments (FHS, BHS, BTS, FTS) are dropped, and a
// batch of no message (BTS|0: a feed with nothing to send) is none; any
// other file with no MSH is one (rejected) message. A UTF-8 byte order mark at the
// start of a segment (Windows editors write one at the start of a file, and
// files concatenated by a Windows tool keep each one's) is dropped: it is
// not part of the message, which would otherwise not begin with MSH, or
// (a later one) be glued to the message before it. So are MLLP block
// characters (0x0B before a message, 0x1C after it): a file some systems
// write is a capture of MLLP frames, and no HL7 content holds them (MLLP
// could not carry it).
func SplitMessages(b []byte) [][]byte {
	b = bytes.TrimPrefix(b, utf8BOM)
	var out [][]byte
	var cur []byte
	envelope := false
	// Walked, not split first: bytes.FieldsFunc made a 24-byte slice of
	// every segment at once, 12 times a file of one-byte segments (768 MB
	// for one within max_file_bytes' default).
	for rest := b; len(rest) > 0; {
		seg := rest
		if i := bytes.IndexAny(rest, "\r\n"); i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		seg = bytes.TrimPrefix(bytes.Trim(seg, "\x0b\x1c"), utf8BOM)
		switch {
		case len(bytes.TrimSpace(seg)) == 0:
			continue // a blank line (spaces, tabs) is no segment: before an MSH it made a junk message
		case bytes.HasPrefix(seg, []byte("FHS")), bytes.HasPrefix(seg, []byte("BHS")),
			bytes.HasPrefix(seg, []byte("BTS")), bytes.HasPrefix(seg, []byte("FTS")):
			envelope = true
			continue
		case bytes.HasPrefix(seg, []byte("MSH")) && len(cur) > 0:
			out = append(out, cur)
			cur = nil
		}
		if free := cap(cur) - len(cur); free < len(seg)+1 {
			// Doubled: append grows a large slice by a quarter, which
			// allocated five times a large message in all.
			grown := make([]byte, len(cur), 2*cap(cur)+len(seg)+1)
			copy(grown, cur)
			cur = grown
		}
		cur = append(append(cur, seg...), '\r')
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	if len(out) == 0 && !envelope && len(bytes.TrimSpace(b)) > 0 {
		out = append(out, b)
	}
	return out
}
