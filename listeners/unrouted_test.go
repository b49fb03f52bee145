package listeners_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
)

// counterValue reads one series of the process's metrics (0 if absent).
func counterValue(t *testing.T, series string) float64 {
	t.Helper()
	var buf bytes.Buffer
	metrics.WritePrometheus(&buf, false)
	for _, line := range strings.Split(buf.String(), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

const unroutedConfig = `
[[inbound]]
name = "unrouted_mllp"
type = "mllp"
listen = "{{listen}}"

[[inbound]]
name = "unrouted_file"
type = "file"
directory = "{{dir}}/in"
poll_interval_seconds = 0.05

[[outbound]]
name = "out"
type = "file"
directory = "{{dir}}/out"

[[route]]
from = "unrouted_mllp"
to = ["out"]
filter = { "MSH-9.1" = "ADT" }

[[route]]
from = "unrouted_file"
to = ["out"]
filter = { "MSH-9.1" = "ADT" }
`

// A message no route takes is stored as unrouted and acknowledged AA. A
// feed whose filters drop a whole message type by design does so for every
// such message, so each is counted in mf_messages_unrouted_total{inbound}
// (an alert on a rate that changes tells a route gone wrong) and logged
// only at DEBUG, instead of an INFO line per message.
func TestUnroutedMessagesAreCountedNotLoggedEach(t *testing.T) {
	addr := enginetest.FreeAddr(t)
	e := enginetest.Start(t, strings.ReplaceAll(unroutedConfig, "{{listen}}", addr))
	const mllpSeries, fileSeries = `mf_messages_unrouted_total{inbound="unrouted_mllp"}`, `mf_messages_unrouted_total{inbound="unrouted_file"}`
	before := counterValue(t, mllpSeries)
	oru := func(id string) string {
		return "MSH|^~\\&|LIS|HOSP|EHR|HOSP|20261121090000||ORU^R01|" + id + "|P|2.5.1\rPID|1||P3\r"
	}
	cl := enginetest.Dial(t, addr)
	for _, id := range []string{"U1", "U2"} {
		if ack := cl.Send(oru(id)); ack.Code != hl7.AA {
			t.Fatalf("%s: %+v", id, ack)
		}
	}
	if ack := cl.Send(enginetest.ADT("R1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("R1: %+v", ack)
	}
	if got := counterValue(t, mllpSeries) - before; got != 2 {
		t.Errorf("%s grew by %v for 2 unrouted messages and 1 routed; want 2", mllpSeries, got)
	}

	beforeFile := counterValue(t, fileSeries)
	in := filepath.Join(e.Dir, "in")
	enginetest.WaitFor(t, "the inbound directory", 5*time.Second, func() bool {
		_, err := os.Stat(in)
		return err == nil
	})
	tmp := enginetest.WriteFile(t, in, ".f.hl7.tmp", []byte(oru("U3")+enginetest.ADT("R2", "P2")))
	if err := os.Rename(tmp, filepath.Join(in, "f.hl7")); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "the file's messages stored", 10*time.Second, func() bool { return len(e.Messages(t)) == 5 })
	// The file inbound counts a message once the ingest has answered it,
	// which may be just after the commit the wait above sees: wait for the
	// count too (no longer than it takes the routed message's answer to come).
	enginetest.WaitFor(t, "the file's unrouted message counted", 5*time.Second, func() bool {
		return counterValue(t, fileSeries)-beforeFile >= 1
	})
	if got := counterValue(t, fileSeries) - beforeFile; got != 1 {
		t.Errorf("%s grew by %v for 1 unrouted message and 1 routed; want 1", fileSeries, got)
	}
	for _, line := range strings.Split(e.Logs.String(), "\n") {
		if strings.Contains(line, "no route matches") && !strings.Contains(line, `"level":"debug"`) {
			t.Errorf("an unrouted message logged above DEBUG: %s", line)
		}
	}
}

// The README says an unrouted message is logged at DEBUG, and an MLLP
// inbound's is, with its id and control id; a file inbound's was not
// logged at all, so an operator who turned on DEBUG to see why a file's
// messages went nowhere found no line about them.
func TestAnUnroutedMessageOfAFileIsLoggedAtDebug(t *testing.T) {
	e := enginetest.Start(t, strings.ReplaceAll(unroutedConfig, "{{listen}}", enginetest.FreeAddr(t)))
	in := filepath.Join(e.Dir, "in")
	enginetest.WaitFor(t, "the inbound directory", 5*time.Second, func() bool {
		_, err := os.Stat(in)
		return err == nil
	})
	oru := "MSH|^~\\&|LIS|HOSP|EHR|HOSP|20261121090000||ORU^R01|U9|P|2.5.1\rPID|1||P3\r"
	tmp := enginetest.WriteFile(t, in, ".g.hl7.tmp", []byte(oru+enginetest.ADT("R9", "P2")))
	if err := os.Rename(tmp, filepath.Join(in, "g.hl7")); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "the file's messages stored", 10*time.Second, func() bool { return len(e.Messages(t)) == 2 })
	var id int64
	for _, m := range e.Messages(t) {
		if m.Message.ControlID == "U9" {
			id = m.Message.ID
		}
	}
	want := []string{`"level":"debug"`, `"inbound":"unrouted_file"`, `"message_id":` + strconv.FormatInt(id, 10), `"control_id":"U9"`, "no route matches"}
	logged := func() bool {
		for _, line := range strings.Split(e.Logs.String(), "\n") {
			found := true
			for _, w := range want {
				found = found && strings.Contains(line, w)
			}
			if found {
				return true
			}
		}
		return false
	}
	// The line comes after the commit that made the messages visible.
	deadline := time.Now().Add(10 * time.Second)
	for !logged() {
		if time.Now().After(deadline) {
			t.Fatalf("no DEBUG line with %q about the unrouted message of the file within 10s:\n%s", want, e.Logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
