package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"github.com/messagefoundry/mf/actors/enginetest"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The store password comes from MF_STORE_PASSWORD (there is no flag for it),
// reaches the database on the wire, and appears in no output, even when the
// database refuses it. The database here is a stand-in that speaks just
// enough of the PostgreSQL protocol to ask for a cleartext password and
// record what it is given.
func TestStorePasswordComesFromTheEnvironment(t *testing.T) {
	t.Parallel()
	const secret = "S3CRET-pw-from-env-7f1c"
	db := startPasswordRecorder(t)
	cfg := filepath.Join(t.TempDir(), "mf.toml")
	if err := os.WriteFile(cfg, []byte(`
[store]
backend = "postgres"
url = "postgres://mf@`+db.addr+`/mf?sslmode=disable&connect_timeout=5"

[api]
listen = "`+enginetest.FreeAddr(t)+`"

[[inbound]]
name = "adt_in"
type = "mllp"
listen = "`+enginetest.FreeAddr(t)+`"

[[outbound]]
name = "out"
type = "file"
directory = "out"

[[route]]
from = "adt_in"
to = ["out"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"migrate"}, {"--log-level", "debug", "run"}} {
		cmd := exec.Command(mfBin, append(args, "--config", cfg)...)
		cmd.Env = append(os.Environ(), "MF_STORE_PASSWORD="+secret)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("mf %v succeeded against a database that refuses every password:\n%s", args, out)
		}
		if bytes.Contains(out, []byte(secret)) {
			t.Fatalf("mf %v printed the password:\n%s", args, out)
		}
		if !strings.Contains(string(out), "password authentication failed") {
			t.Fatalf("mf %v does not say why it failed:\n%s", args, out)
		}
		t.Logf("mf %v: %s", args, strings.TrimSpace(string(out)))
	}
	got := db.passwords()
	if len(got) == 0 {
		t.Fatal("the database was never sent a password")
	}
	for _, p := range got {
		if p != secret {
			t.Fatalf("the database was sent %q, want MF_STORE_PASSWORD's value", p)
		}
	}
}

// passwordRecorder is a PostgreSQL stand-in: it answers every connection's
// start-up with a request for a cleartext password, records the password
// and refuses it (SQLSTATE 28P01).
type passwordRecorder struct {
	addr string
	got  chan string
}

func startPasswordRecorder(t *testing.T) *passwordRecorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &passwordRecorder{addr: ln.Addr().String(), got: make(chan string, 100)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(c)
		}
	}()
	return r
}

func (r *passwordRecorder) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for { // the start-up message, after any SSLRequest (answered "no")
		var n uint32
		if binary.Read(br, binary.BigEndian, &n) != nil || n < 8 || n > 10000 {
			return
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		if binary.BigEndian.Uint32(body) != 80877103 { // not an SSLRequest
			break
		}
		c.Write([]byte{'N'})
	}
	c.Write([]byte{'R', 0, 0, 0, 8, 0, 0, 0, 3}) // AuthenticationCleartextPassword
	var typ byte
	var n uint32
	if binary.Read(br, binary.BigEndian, &typ) != nil || typ != 'p' || binary.Read(br, binary.BigEndian, &n) != nil || n < 5 || n > 10000 {
		return
	}
	body := make([]byte, n-4)
	if _, err := io.ReadFull(br, body); err != nil {
		return
	}
	r.got <- string(bytes.TrimRight(body, "\x00"))
	fields := "SFATAL\x00C28P01\x00Mpassword authentication failed for user \"mf\"\x00\x00"
	msg := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(4+len(fields)))
	c.Write(append(msg, fields...))
}

// passwords returns what the stand-in has been sent so far.
func (r *passwordRecorder) passwords() []string {
	var out []string
	for {
		select {
		case p := <-r.got:
			out = append(out, p)
		default:
			return out
		}
	}
}
