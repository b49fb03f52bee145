package listeners_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
)

// batchStats reads the ingest batch histogram: how many commits, how many
// messages in them.
func batchStats(t *testing.T) (commits, messages float64) {
	t.Helper()
	var buf bytes.Buffer
	metrics.WritePrometheus(&buf, false)
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		switch name {
		case "mf_ingest_batch_size_count":
			commits = v
		case "mf_ingest_batch_size_sum":
			messages = v
		}
	}
	return commits, messages
}

// Messages arriving together on many connections share transactions (group
// commit), and every sender still gets its AA only after the commit that
// holds its message: all of them are stored once each.
func TestGroupCommitSharesTransactions(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, strings.ReplaceAll(ackConfig, "{{listen}}", addr))
	commits0, msgs0 := batchStats(t)

	const conns, each = 32, 25
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		cl := dial(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := fmt.Sprintf("G%02d-%02d", c, i)
				if ack := cl.Send(adt(id, fmt.Sprintf("P%d", c))); ack.Code != hl7.AA || ack.ControlID != id {
					t.Errorf("%s: %+v", id, ack)
					return
				}
			}
		}()
	}
	wg.Wait()

	commits1, msgs1 := batchStats(t)
	commits, msgs := commits1-commits0, msgs1-msgs0
	t.Logf("%d messages in %.0f commits: %.1f messages per commit", conns*each, commits, msgs/commits)
	if msgs != conns*each {
		t.Fatalf("the batch histogram counted %.0f messages, want %d", msgs, conns*each)
	}
	if commits >= msgs {
		t.Fatalf("%.0f commits for %.0f messages: no transaction was shared", commits, msgs)
	}
	stored := map[string]int{}
	for _, d := range e.Messages(t) {
		stored[d.Message.ControlID]++
	}
	for c := 0; c < conns; c++ {
		for i := 0; i < each; i++ {
			if id := fmt.Sprintf("G%02d-%02d", c, i); stored[id] != 1 {
				t.Fatalf("%s stored %d times", id, stored[id])
			}
		}
	}
}

// The file inbound ingests every message of each file, then moves the file
// to the archive; the messages are delivered like any other. A message the
// store refuses is kept as rejected and holds up neither the file nor the
// others.
func TestFileInboundIngestsAndArchives(t *testing.T) {
	for _, refuse := range []string{"", "F2"} {
		t.Run("refused="+refuse, func(t *testing.T) { testFileInbound(t, refuse) })
	}
}

func testFileInbound(t *testing.T, refuse string) {
	e := enginetest.Start(t, `
[[inbound]]
name = "drop"
type = "file"
directory = "{{dir}}/in"
poll_interval_seconds = 0.05

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "drop"
to = ["out"]
`)
	if refuse != "" {
		e.Store.RefuseControlID.Store(&refuse)
	}
	in := filepath.Join(e.Dir, "in")
	enginetest.WaitFor(t, "the inbound directory", 5*time.Second, func() bool {
		_, err := os.Stat(in)
		return err == nil
	})
	// Written under a temporary name, then renamed: the poller never reads
	// a half-written file.
	batch := strings.ReplaceAll(adt("F1", "P1")+adt("F2", "P1")+adt("F3", "P2"), "\r", "\n")
	tmp := enginetest.WriteFile(t, in, ".batch.tmp", []byte(batch))
	if err := os.Rename(tmp, filepath.Join(in, "batch.hl7")); err != nil {
		t.Fatal(err)
	}
	want, wantIDs := 3, "F1,F2,F3"
	if refuse != "" {
		want, wantIDs = 2, "F1,,F3" // the refused one kept with its bytes only
	}
	enginetest.WaitFor(t, "the messages delivered and the file archived", 10*time.Second, func() bool {
		out, _ := os.ReadDir(filepath.Join(e.Dir, "out"))
		_, archived := os.Stat(filepath.Join(in, "archive", "batch.hl7"))
		_, left := os.Stat(filepath.Join(in, "batch.hl7"))
		return len(out) == want && archived == nil && os.IsNotExist(left)
	})
	var ids []string
	for _, d := range e.Messages(t) {
		refused := d.Message.ControlID == "" && strings.Contains(string(d.Message.Payload), "|F2|")
		if d.Message.Inbound != "drop" || (d.Message.Status != storage.MessageRouted) != refused ||
			refused && (d.Message.Status != storage.MessageRejected || !strings.Contains(d.Message.Error, "refused")) {
			t.Fatalf("stored %+v", d.Message)
		}
		ids = append(ids, d.Message.ControlID)
	}
	if strings.Join(ids, ",") != wantIDs {
		t.Fatalf("stored %v; want %s in file order", ids, wantIDs)
	}
}
