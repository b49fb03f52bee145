//go:build linux

package e2e

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
)

// PgBouncer in front of the database. In session mode (each client
// connection holds a server session until it disconnects) a node runs as
// on PostgreSQL itself: before, it could not connect at all, as PgBouncer
// refused the session settings a clustered node sent with its startup
// ("unsupported startup parameter"), and the node waited at start saying it
// could not reach the database. In transaction mode (a server session per
// transaction, shared between clients) the settings that make mf's commits
// durable and let a frozen primary's locks go hold for one transaction in
// many, and LISTEN and prepared statements break: the node is refused at
// start, exit 1, saying to use session pooling. Before, it started, and its
// writes failed now and then on prepared statements ("prepared statement
// \"stmtcache_…\" does not exist", AE to senders), or it exited at start on
// one.
func TestClusterBehindPgBouncer(t *testing.T) {
	t.Parallel()
	direct, admin := scratchDatabase(t)

	t.Run("session", func(t *testing.T) {
		c := &cluster{t: t, url: direct, timing: fast, dest: startReceiver(t, ""), admin: admin}
		c.addNode(viaPgBouncer(t, direct, "session"))
		if p := c.waitForPrimary(-1); p != 0 {
			t.Fatalf("node-%d is primary; want node-0", p)
		}
		if !c.acks(0) {
			t.Fatalf("the node behind PgBouncer in session mode does not acknowledge:\n%s", c.nodes[0].logs.String())
		}
	})
	t.Run("transaction", func(t *testing.T) {
		c := &cluster{t: t, url: direct, timing: fast, dest: startReceiver(t, ""), admin: admin}
		e := c.addNode(viaPgBouncer(t, direct, "transaction"))
		select {
		case <-e.exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("a node behind PgBouncer in transaction mode still runs after 30 s:\n%s", e.logs.String())
		}
		if code := e.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(e.logs.String(), "pool_mode = session") {
			t.Fatalf("exit code %d; want 1, with a line that says to set pool_mode = session:\n%s", code, e.logs.String())
		}
	})
}

// viaPgBouncer starts a PgBouncer in pool mode mode in front of the
// database of direct, stopped when t ends, and returns direct's URL through
// it. As root, PgBouncer (which refuses to run as root) runs as the OS user
// postgres through runuser.
func viaPgBouncer(t *testing.T, direct, mode string) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/pgbouncer"); err != nil {
			missingTool(t, "pgbouncer is not installed (apt-get install pgbouncer)")
		}
	}
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parents are private to us, and PgBouncer's OS
	// user must read its files.
	dir, err := os.MkdirTemp("", "mf-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	listen := freePort(t)
	lhost, lport, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatal(err)
	}
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s
[pgbouncer]
listen_addr = %s
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = 20
max_client_conn = 200
`, db, host, port, db, lhost, lport, filepath.Join(dir, "users.txt"), mode)
	for name, body := range map[string]string{"pgbouncer.ini": ini, "users.txt": fmt.Sprintf("%q \"\"\n", u.User.Username())} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	cmd := exec.Command(bin, args...)
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("runuser"); err != nil {
			missingTool(t, "running as root, PgBouncer must run as the OS user postgres, through runuser: %v", err)
		}
		if _, err := user.Lookup("postgres"); err != nil {
			missingTool(t, "running as root, PgBouncer needs an OS user postgres to run as: %v", err)
		}
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	}
	cmd.Dir = dir
	out := &enginetest.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) // runuser passes it on
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("pgbouncer (pid %d) did not stop on SIGTERM within 10 s:\n%s", cmd.Process.Pid, out.String())
			cmd.Process.Kill()
		}
	})
	waitFor(t, "PgBouncer to listen on "+listen, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("pgbouncer exited:\n%s", out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", listen, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	u.Host = listen
	return u.String()
}
