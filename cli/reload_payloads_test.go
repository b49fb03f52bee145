package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A reload that turns log_payloads off applies to every log line that
// heeds it, net/http's own (routeStdlibLog) too: that one kept the value
// the node started with, so after such a reload a destination's echo of
// a message (patient fields) still went into the log, with nothing said.
func TestAReloadThatTurnsLogPayloadsOffReachesTheHTTPClientsLines(t *testing.T) {
	url := pgtest.NewSchema(t)
	listen, api, echo := enginetest.FreeAddr(t), enginetest.FreeAddr(t), echoingPastItsAnswer(t)
	file := func(payloads bool) string {
		s := "[store]\nbackend = \"postgres\"\npool_size = 3\nlease_ttl_seconds = 5\nurl = \"" + url + "\"\n" +
			"[cluster]\nenabled = true\nheartbeat_seconds = 0.2\nleader_fence_timeout_seconds = 0.5\nleader_lease_ttl_seconds = 1\nnode_timeout_seconds = 1\n" +
			"[api]\nlisten = \"" + api + "\"\n" +
			"[[inbound]]\nname = \"adt_in\"\ntype = \"mllp\"\nlisten = \"" + listen + "\"\n" +
			"[[outbound]]\nname = \"emr\"\ntype = \"http\"\ntimeout_seconds = 2\nurl = \"" + echo + "\"\n" +
			"[[route]]\nfrom = \"adt_in\"\nto = [\"emr\"]\n"
		if payloads {
			s = "log_payloads = true\n" + s
		}
		return s
	}
	path := filepath.Join(t.TempDir(), "mf.toml")
	if err := os.WriteFile(path, []byte(file(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := runInProcess(t, path)
	enginetest.WaitFor(t, "the node to lead and open its port", 30*time.Second, func() bool { return dialable(listen) })

	if err := os.WriteFile(path, []byte(file(false)), 0o600); err != nil {
		t.Fatal(err)
	}
	// mf reload's bump (run in this process, its logger would race the
	// node's on zerolog's globals).
	st, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.ConfigVersionBump(context.Background(), storage.ConfigVersionBumpParams{}); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "the reload", 30*time.Second, func() bool { return strings.Contains(logs.String(), `"config reloaded"`) })
	enginetest.WaitFor(t, "the reloaded graph's port", 30*time.Second, func() bool { return dialable(listen) })

	msg := "MSH|^~\\&|A|B|C|D|20261126||ADT^A01|C1|P|2.5.1\rPID|1||SECRETMRN4711||DOE^JANE\r"
	if ack := enginetest.Dial(t, listen).Send(msg); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	enginetest.WaitFor(t, "net/http's line about the bytes on the idle connection", 30*time.Second, func() bool {
		return strings.Contains(logs.String(), "idle HTTP channel")
	})
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "SECRETMRN4711") {
			t.Fatalf("log_payloads was turned off by a reload, and a log line still carries the patient id:\n%q", line)
		}
	}
}

func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err == nil {
		c.Close()
	}
	return err == nil
}
