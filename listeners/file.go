package listeners

import (
	"bytes"
	"errors"
	"fmt"
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
type FilePoller struct {
	env   *Env
	cfg   config.Inbound
	log   zerolog.Logger
	timer scheduler.CancelFunc
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
			if err := os.MkdirAll(dir, 0o750); err != nil {
				f.log.Error().Err(err).Str("directory", dir).Msg("cannot create the file inbound's directory; polling anyway")
			}
		}
		f.timer = scheduler.NewTimerScheduler(ctx).SendRepeatedly(0, f.cfg.PollInterval(), ctx.Self(), poll{})
	case poll:
		f.poll()
	case *actor.Stopping, *actor.Restarting:
		if f.timer != nil {
			f.timer()
		}
	}
}

func (f *FilePoller) poll() {
	entries, err := os.ReadDir(f.cfg.Directory)
	if err != nil {
		f.log.Error().Err(err).Str("directory", f.cfg.Directory).Msg("cannot list the file inbound's directory")
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	for _, e := range entries {
		name := e.Name()
		// Hidden and temporary names are files still being written.
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tmp") {
			continue
		}
		if f.env.Ctx.Err() != nil {
			return
		}
		if !f.ingestFile(filepath.Join(f.cfg.Directory, name)) {
			return // keep order: later files wait for this one
		}
	}
}

// ingestFile stores every message of one file and archives it; false when
// the file must be tried again.
func (f *FilePoller) ingestFile(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		f.log.Error().Err(err).Str("file", filepath.Base(path)).Msg("cannot read an inbound file; will retry")
		return false
	}
	msgs := SplitMessages(b)
	reply := make(chan Result, len(msgs))
	for _, raw := range msgs {
		countReceived(f.cfg.Name)
		f.env.System.Root.Send(f.env.Ingest, Submit{Msg: f.newMessage(raw), Reply: reply})
	}
	for range msgs {
		r, _ := f.env.await(reply, nil)
		if errors.Is(r.Err, storage.ErrRefused) {
			// Kept as rejected (the ingest logged it); the file's bytes
			// go to the archive all the same.
			countRejected(f.cfg.Name, reasonRefused)
			continue
		}
		if r.Err != nil {
			f.log.Error().Err(r.Err).Str("file", filepath.Base(path)).Msg("storing a message of an inbound file failed; the file stays and is read again")
			return false
		}
	}
	dest := filepath.Join(f.cfg.ArchiveDirectory, filepath.Base(path))
	if _, err := os.Stat(dest); err == nil {
		dest = fmt.Sprintf("%s.%d", dest, time.Now().UnixNano())
	}
	if err := os.Rename(path, dest); err != nil {
		f.log.Error().Err(err).Str("file", filepath.Base(path)).Msg("cannot move an ingested file to the archive; it would be ingested again, so polling stops until this is fixed")
		return false
	}
	f.log.Info().Str("file", filepath.Base(path)).Int("messages", len(msgs)).Msg("inbound file ingested and archived")
	return true
}

func (f *FilePoller) newMessage(raw []byte) storage.NewMessage {
	msg, err := hl7.Parse(raw)
	if err != nil {
		countRejected(f.cfg.Name, reasonParse)
		return storage.NewMessage{Inbound: f.cfg.Name, Payload: raw, Status: storage.MessageRejected, Error: err.Error()}
	}
	d := f.env.Router.Route(f.cfg.Name, msg)
	status := storage.MessageRouted
	if len(d) == 0 {
		status = storage.MessageUnrouted
	}
	return storage.NewMessage{Inbound: f.cfg.Name, ControlID: msg.ControlID(), MessageType: msg.MessageType(),
		Payload: raw, Status: status, Deliveries: d}
}

// SplitMessages cuts a file into its HL7 messages: each MSH segment starts
// one. Batch envelope segments (FHS, BHS, BTS, FTS) are dropped; a file
// with no MSH is one (rejected) message.
func SplitMessages(b []byte) [][]byte {
	var out [][]byte
	var cur []byte
	for _, seg := range bytes.FieldsFunc(b, func(r rune) bool { return r == '\r' || r == '\n' }) {
		switch {
		case bytes.HasPrefix(seg, []byte("FHS")), bytes.HasPrefix(seg, []byte("BHS")),
			bytes.HasPrefix(seg, []byte("BTS")), bytes.HasPrefix(seg, []byte("FTS")):
			continue
		case bytes.HasPrefix(seg, []byte("MSH")) && len(cur) > 0:
			out = append(out, cur)
			cur = nil
		}
		cur = append(append(cur, seg...), '\r')
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	if len(out) == 0 && len(bytes.TrimSpace(b)) > 0 {
		out = append(out, b)
	}
	return out
}
