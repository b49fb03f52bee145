package listeners_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
)

// With the store's disk full, a sender gets AE, never AA nor AR, for each
// message that could not be stored; the failure is logged once, saying where
// to free space, without the messages' contents; once space is back, the
// messages sent again are AA, and every message that was AA is delivered,
// with no restart.
func TestAFullDiskAnswersAEUntilSpaceIsBack(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, hostileConfig(addr, ""))
	cl := dial(t, addr)
	const phi = "NTE|1||PATIENT-SECRET-TEXT"
	msg := func(id string) string {
		return adt(id, "P"+id) + strings.Repeat(phi+"\r", 200) // 5 kB: pages overflow
	}
	out := filepath.Join(e.Dir, "out")
	delivered := func() int { entries, _ := os.ReadDir(out); return len(entries) }
	accepted := []string{"M0"}
	if ack := cl.Send(msg("M0")); ack.Code != hl7.AA {
		t.Fatalf("M0: %+v", ack)
	}
	enginetest.WaitFor(t, "M0 delivered", 10*time.Second, func() bool { return delivered() == 1 })

	e.LimitDiskPages(t, 4)
	var failed []string
	for i := 0; len(failed) < 20; i++ {
		if i == 100 {
			t.Fatalf("100 messages sent to a store with room for 4 pages, %d answered AE", len(failed))
		}
		id := "F" + string(rune('A'+i%26)) + string(rune('A'+i/26))
		switch ack := cl.Send(msg(id)); ack.Code {
		case hl7.AA:
			accepted = append(accepted, id)
		case hl7.AE:
			failed = append(failed, id)
		default:
			t.Fatalf("%s on a full disk: %+v; want AA or AE", id, ack)
		}
	}
	logs := e.Logs.String()
	if n := strings.Count(logs, "storing a batch of messages failed"); n != 1 {
		t.Errorf("%d messages not stored for a full disk logged %d times, want once:\n%s", len(failed), n, logs)
	}
	if want := "free disk space on the file system of " + e.Config.Store.Path; !strings.Contains(logs, want) {
		t.Errorf("no log line says %q:\n%s", want, logs)
	}

	e.LimitDiskPages(t, 1<<20) // space freed
	for _, id := range failed {
		if ack := cl.Send(msg(id)); ack.Code != hl7.AA {
			t.Fatalf("%s sent again once space is back: %+v", id, ack)
		}
		accepted = append(accepted, id)
	}
	enginetest.WaitFor(t, "every message accepted delivered", 20*time.Second, func() bool { return delivered() == len(accepted) })
	stored := map[string]int{}
	for _, d := range e.Messages(t) {
		stored[d.Message.ControlID]++
	}
	for _, id := range accepted {
		if stored[id] != 1 {
			t.Errorf("%s accepted, stored %d times", id, stored[id])
		}
	}
	logs = e.Logs.String()
	if !strings.Contains(logs, "storing messages works again") {
		t.Errorf("no line says storing works again:\n%s", logs)
	}
	if strings.Contains(logs, "PATIENT-SECRET-TEXT") {
		t.Errorf("a log line carries a message's contents:\n%s", logs)
	}
}
