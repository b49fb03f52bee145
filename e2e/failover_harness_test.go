package e2e

// The pieces of the failover suite (TestFailover, failover_test.go): a
// private PostgreSQL server, HAProxy as the partners' VIP, a sender that
// behaves like a partner behind that VIP, and the figures measured at the
// VIP and at the destination.

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage/postgres"
)

// ciEnabled reports whether CI=true: then a missing tool fails the suite
// instead of skipping it, so that CI can never pass by skipping.
func ciEnabled() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// failoverGate skips the suite unless it was asked for: it needs HAProxy and
// PostgreSQL binaries and takes minutes.
func failoverGate(t *testing.T) {
	t.Helper()
	if os.Getenv("MF_FAILOVER") == "1" || ciEnabled() {
		return
	}
	t.Skip("the failover suite (HAProxy as the VIP, a private PostgreSQL, a few minutes) runs with MF_FAILOVER=1 or CI=true: " +
		"MF_FAILOVER=1 go test -run Failover -v ./e2e/ (MF_FAILOVER_REPORT=file.jsonl appends each fault's figures)")
}

// missingTool skips the test, or fails it under CI=true.
func missingTool(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if ciEnabled() {
		t.Fatalf("%s (CI=true: the failover suite requires it)", msg)
	}
	t.Skipf("%s: the failover suite is skipped (CI=true makes this a failure)", msg)
}

// pollUntil polls cond every interval until it holds (true) or timeout
// passes (false). The suite's own waits use it where the 20 ms of waitFor
// would make a large check (every delivery so far) compete with the engine
// for the CPU, or where a timeout is a figure to report, not a failure.
func pollUntil(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// queueEmpty reports whether no row is pending or in flight.
func (c *cluster) queueEmpty() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM mf_queue WHERE status IN ('pending', 'inflight')`).Scan(&n)
	return err == nil && n == 0
}

// settled waits until the cluster has nothing left to deliver, and nothing
// more can come: no row pending or in flight, no arrival at the sink for a
// poll, and at least a row lease and a sweep after the last fault (a row
// wrongly re-pended when a lease of the fault's time ran out arrives by
// then). It reports whether that happened within timeout.
func (c *failoverCluster) settled(lastFault time.Time, timeout time.Duration) bool {
	after := lastFault.Add(rowLease + reclaimEvery + time.Second)
	n := -1
	return pollUntil(timeout, 500*time.Millisecond, func() bool {
		m := len(c.dest.received())
		quiet := m == n
		n = m
		return quiet && time.Now().After(after) && c.queueEmpty()
	})
}

// repeatsAwayFromFaults returns the deliveries, in arrival order, that
// repeat a message with no fault between the copy before and this one:
// no fault instant at or before this copy and at most slack after the copy
// before (a row in flight at a fault is sent again after it; its first
// copy may still arrive after the instant, from a primary that acts until
// its trust window ends). Every duplicate of a run without faults is one.
func repeatsAwayFromFaults(got []received, instants []time.Time, slack time.Duration) []string {
	prev := map[string]time.Time{}
	var out []string
	for _, r := range got {
		if before, ok := prev[r.ControlID]; ok {
			near := false
			for _, at := range instants {
				if !at.After(r.At) && !before.After(at.Add(slack)) {
					near = true
					break
				}
			}
			if !near {
				out = append(out, fmt.Sprintf("%s again at %s, %v after its copy before, with no fault between", r.ControlID, r.At.Format("15:04:05.000"), r.At.Sub(before).Round(time.Millisecond)))
			}
		}
		prev[r.ControlID] = r.At
	}
	return out
}

// --- A private PostgreSQL ---------------------------------------------------

// privatePG is a PostgreSQL server of the suite's own: initdb into a
// temporary directory, trust authentication, loopback only, fsync on. The
// suite restarts it (a fault), which it must never do to the shared server
// other packages' tests use.
type privatePG struct {
	bin  string // the directory of initdb and pg_ctl
	dir  string // owned by the server's OS user: data/ and server.log
	port int
	// osUser is "postgres" when the tests run as root (the server refuses
	// to run as root), "" to run the binaries as ourselves.
	osUser string
}

// findPGBin finds initdb and pg_ctl: MF_PG_BINDIR, else PATH, else the
// newest /usr/lib/postgresql/*/bin (Debian's layout, not on PATH).
func findPGBin() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "pg_ctl"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("MF_PG_BINDIR"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("MF_PG_BINDIR=%s has no initdb and pg_ctl", d)
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin; set MF_PG_BINDIR")
}

// startPrivatePG initialises and starts a server; it is stopped and its
// directory removed when t (the suite's parent test) ends.
func startPrivatePG(t *testing.T) *privatePG {
	t.Helper()
	bin, err := findPGBin()
	if err != nil {
		missingTool(t, "%v", err)
	}
	pg := &privatePG{bin: bin}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("runuser"); err != nil {
			missingTool(t, "running as root, the private PostgreSQL must run as the OS user postgres, through runuser: %v", err)
		}
		if _, err := user.Lookup("postgres"); err != nil {
			missingTool(t, "running as root, the private PostgreSQL needs an OS user postgres to run as: %v", err)
		}
		pg.osUser = "postgres"
	}
	// Not t.TempDir: its parents are private to us, and the server's OS
	// user must be able to reach the directory.
	if pg.dir, err = os.MkdirTemp("", "mf-failover-pg-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.destroy)
	if pg.osUser != "" {
		u, _ := user.Lookup(pg.osUser)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(pg.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	_, port, _ := net.SplitHostPort(freePort(t))
	pg.port, _ = strconv.Atoi(port)

	// --no-sync only skips syncing initdb's own files: the server runs
	// with fsync on, so that a COMMIT (an AA) means what it does in
	// production. Statements slower than 500 ms are logged, and
	// PostgreSQL 15 logs its checkpoints: the story of a fault shows them
	// (a stall of every commit, as when the disk stalls, reads differently
	// from one lock).
	pg.run(t, "initdb", "-D", pg.data(), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync", "--no-instructions")
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = ''
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
log_min_duration_statement = 500
`, pg.port)
	// Appending keeps the file's owner (the server's OS user).
	f, err := os.OpenFile(filepath.Join(pg.data(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	pg.run(t, "pg_ctl", "-D", pg.data(), "-l", pg.logFile(), "-w", "-t", "60", "start")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.url("postgres"))
	if err != nil {
		t.Fatalf("the private PostgreSQL started but does not answer: %v\n%s", err, pg.logTail())
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("private PostgreSQL %s on 127.0.0.1:%d (%s)", version, pg.port, pg.data())
	return pg
}

func (pg *privatePG) data() string    { return filepath.Join(pg.dir, "data") }
func (pg *privatePG) logFile() string { return filepath.Join(pg.dir, "server.log") }

// addr is the server's host:port.
func (pg *privatePG) addr() string { return fmt.Sprintf("127.0.0.1:%d", pg.port) }

// url is the URL of database db on the server.
func (pg *privatePG) url(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", pg.addr(), db)
}

// command builds a command that runs a PostgreSQL binary as the server's
// OS user.
func (pg *privatePG) command(name string, args ...string) *exec.Cmd {
	name = filepath.Join(pg.bin, name)
	var cmd *exec.Cmd
	if pg.osUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", pg.osUser, "--", name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	cmd.Dir = pg.dir // the server's user may not be allowed into ours
	return cmd
}

// run runs a PostgreSQL binary as the server's OS user and fails t if it
// fails.
func (pg *privatePG) run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := pg.command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s\n--- server log:\n%s", name, strings.Join(args, " "), err, out, pg.logTail())
	}
}

// restart restarts the server with pg_ctl's shutdown mode ("fast": end
// every session, checkpoint; "immediate": no checkpoint, crash recovery at
// start) and waits until it accepts connections again.
func (pg *privatePG) restart(t *testing.T, mode string) {
	t.Helper()
	pg.run(t, "pg_ctl", "-D", pg.data(), "-l", pg.logFile(), "-w", "-t", "60", "-m", mode, "restart")
}

// createDB creates a database of its own for one fault (a fresh schema,
// migrated by the test) and drops it when t ends.
func (pg *privatePG) createDB(t *testing.T, name string) string {
	t.Helper()
	do := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pg.url("postgres"))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := do("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := do("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	return pg.url(name)
}

// destroy stops the server and removes its directory.
func (pg *privatePG) destroy() {
	if fileExists(filepath.Join(pg.data(), "postmaster.pid")) {
		pg.command("pg_ctl", "-D", pg.data(), "-m", "immediate", "-w", "-t", "30", "stop").Run()
	}
	os.RemoveAll(pg.dir)
}

// logTail is the end of the server's log, for failure messages.
func (pg *privatePG) logTail() string {
	b, _ := os.ReadFile(pg.logFile())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// logSince is the lines of the server's log written after offset from
// that hold one of words, the last 100 of them at most.
func (pg *privatePG) logSince(offset int64, words ...string) string {
	b, err := os.ReadFile(pg.logFile())
	if err != nil {
		return err.Error()
	}
	if offset > int64(len(b)) {
		offset = 0 // a new log
	}
	lines := strings.Split(grepLines(string(b[offset:]), words...), "\n")
	return strings.Join(lines[max(0, len(lines)-100):], "\n")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// --- HAProxy, the VIP ----------------------------------------------------------

// vipCheck is how HAProxy decides which node takes the partners' traffic.
type vipCheck string

const (
	// checkTCP is the README's check: a TCP connect to the MLLP port, which
	// only the primary opens. A SIGSTOPped primary's kernel still completes
	// the handshake, so it passes on a frozen node.
	checkTCP vipCheck = "tcp"
	// checkRole asks each node's API for its own role (GET /cluster/status,
	// answered from the node's memory, so a database outage does not fail
	// it) and expects "primary". A frozen node does not answer at all.
	checkRole vipCheck = "role"
)

// vip is an HAProxy process in front of a cluster's MLLP ports: mode tcp,
// one server per node, a check every 100 ms, a failing node's sessions shut
// down so that partners reconnect to the next primary.
type vip struct {
	addr   string // the frontend: what partners connect to
	sock   string // the stats socket
	cmd    *exec.Cmd
	logs   *enginetest.LogBuffer
	exited chan struct{}
}

// haproxyBin finds HAProxy, or skips (fails under CI=true).
func haproxyBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		missingTool(t, "haproxy is not installed (apt-get install haproxy)")
	}
	return bin
}

// vipConfig is the HAProxy configuration. Why each setting:
//   - inter 100ms fall 1 rise 1: a node is taken out, or put in, at its
//     first failed, or passed, check (the figure; the README's
//     example has inter 1s fall 2).
//   - on-marked-down shutdown-sessions: partners connected through a node
//     that failed its check are cut, and reconnect to the next primary.
//   - timeout connect 200ms, retries 3, option redispatch 1: a connect
//     refused by a node that has just closed its port (its check has not
//     run yet) is retried, on another node, after a turn-around of
//     min(timeout connect, 1s) instead of HAProxy's default one second.
//   - timeout client/server 1m: an idle partner connection is normal for
//     MLLP; these timeouts do not decide failover, the checks do.
//   - timeout check 500ms: the role check's answer (an HTTP request under
//     -race on a loaded two-core machine can take a while; a frozen node
//     never answers, so it only bounds how fast that is noticed).
const vipConfig = `global
    maxconn 4096
    stats socket {{sock}} mode 600 level admin

defaults
    mode tcp
    timeout connect 200ms
    timeout client 1m
    timeout server 1m
    timeout check 500ms
    retries 3
    option redispatch 1

frontend mllp_vip
    bind {{addr}}
    default_backend mf

backend mf
{{check}}
    default-server inter 100ms fall 1 rise 1 on-marked-down shutdown-sessions
{{servers}}
`

// startVIP runs HAProxy in the foreground (-db), as a child that the test
// kills at its end, and waits until its stats socket lists every node.
func startVIP(t *testing.T, nodes []*engine, check vipCheck) *vip {
	t.Helper()
	bin := haproxyBin(t)
	dir := t.TempDir()
	v := &vip{addr: freePort(t), sock: filepath.Join(dir, "haproxy.sock"), logs: &enginetest.LogBuffer{}, exited: make(chan struct{})}
	var servers []string
	for i, n := range nodes {
		line := fmt.Sprintf("    server node-%d %s check", i, n.listen)
		if check == checkRole {
			_, apiPort, _ := net.SplitHostPort(strings.TrimPrefix(n.api, "http://"))
			line += " port " + apiPort
		}
		servers = append(servers, line)
	}
	checkCfg := "    option tcp-check"
	if check == checkRole {
		checkCfg = "    option httpchk\n" +
			"    http-check send meth GET uri /cluster/status ver HTTP/1.1 hdr Host mf hdr Authorization \"Bearer " + viewerToken + "\"\n" +
			"    http-check expect rstring \"role\\\":\\s*\\\"primary\\\"\""
	}
	cfg := strings.NewReplacer("{{sock}}", v.sock, "{{addr}}", v.addr, "{{check}}", checkCfg,
		"{{servers}}", strings.Join(servers, "\n")).Replace(vipConfig)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-q", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c rejects the VIP config: %v\n%s\n%s", err, out, cfg)
	}
	v.cmd = exec.Command(bin, "-f", path, "-db")
	v.cmd.Stdout, v.cmd.Stderr = v.logs, v.logs
	if err := v.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { v.cmd.Wait(); close(v.exited) }()
	t.Cleanup(func() { v.cmd.Process.Kill(); <-v.exited })
	waitFor(t, "HAProxy's stats socket to list the nodes", 10*time.Second, func() bool {
		select {
		case <-v.exited:
			t.Fatalf("haproxy exited:\n%s", v.logs.String())
		default:
		}
		st, err := v.states()
		return err == nil && len(st) == len(nodes)
	})
	return v
}

// states reads HAProxy's view of each node ("UP", "DOWN", ...) from its
// stats socket.
func (v *vip) states() (map[string]string, error) {
	c, err := net.DialTimeout("unix", v.sock, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return nil, err
	}
	r := csv.NewReader(bufio.NewReader(c))
	r.FieldsPerRecord = -1
	out := map[string]string{}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		// Fields: 0 pxname, 1 svname, ..., 17 status.
		if len(rec) > 17 && rec[0] == "mf" && strings.HasPrefix(rec[1], "node-") {
			out[rec[1]] = rec[17]
		}
	}
}

// up lists the nodes HAProxy sends partners to now.
func (v *vip) up() []string {
	st, err := v.states()
	if err != nil {
		return []string{"(stats: " + err.Error() + ")"}
	}
	var out []string
	for n, s := range st {
		if strings.HasPrefix(s, "UP") {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// transitions are HAProxy's log lines about nodes going UP or DOWN.
func (v *vip) transitions() string { return grepLines(v.logs.String(), " is UP", " is DOWN") }

// --- The cluster behind the VIP -----------------------------------------------

// failoverCluster is a cluster on a database of the private server, each
// node reaching it through a proxy of its own (so that one node's database
// connections can be cut), behind HAProxy.
type failoverCluster struct {
	*cluster
	server  *privatePG
	proxies []*enginetest.Proxy
	vip     *vip
	// earlierLogs holds, per node, the logs of its incarnations before the
	// running one (a killed node is started again).
	earlierLogs []string
	// serverLogFrom is the size of the server's log when the cluster
	// started: its story is what was logged after.
	serverLogFrom int64
	// tellStory asks for the logs of a fault that passed, for a figure
	// worth explaining.
	tellStory bool
}

var failoverDBs atomic.Int32

// startFailoverCluster starts n nodes on a fresh database and HAProxy in
// front of them, and waits until the VIP routes to the primary.
func startFailoverCluster(t *testing.T, pg *privatePG, n int, tm timing, check vipCheck) *failoverCluster {
	t.Helper()
	url := pg.createDB(t, fmt.Sprintf("mf_failover_%d", failoverDBs.Add(1)))
	fc := &failoverCluster{cluster: &cluster{t: t, url: url, timing: tm, dest: startReceiver(t, "")}, server: pg}
	if st, err := os.Stat(pg.logFile()); err == nil {
		fc.serverLogFrom = st.Size()
	}
	admin, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	if err := admin.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	fc.admin = admin
	for range n {
		px := enginetest.StartProxy(t, pg.addr())
		fc.proxies = append(fc.proxies, px)
		fc.addNode(px.Via(t, url))
	}
	fc.vip = startVIP(t, fc.nodes, check)
	fc.earlierLogs = make([]string, n)
	t.Cleanup(fc.reportLogs)
	t.Cleanup(fc.checkRaces) // first, so that a race found is a failure whose logs are kept
	p := fc.waitPrimary(-1, 60*time.Second)
	waitFor(t, "HAProxy to route to the primary only", 10*time.Second, func() bool {
		return slices.Equal(fc.vip.up(), []string{fmt.Sprintf("node-%d", p)})
	})
	return fc
}

// waitPrimary waits until a node other than not holds a live lease, runs,
// and accepts MLLP connections, and returns it. It sends nothing (the
// partner's AAs are the proof that it acknowledges), and it leaves node not
// out because a frozen process's kernel still accepts connections.
func (fc *failoverCluster) waitPrimary(not int, timeout time.Duration) int {
	fc.t.Helper()
	p := -1
	waitFor(fc.t, "a primary", timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l, err := fc.admin.LeaseRead(ctx)
		if err != nil || l.Remaining() <= 0 {
			return false
		}
		i, err := strconv.Atoi(strings.TrimPrefix(l.Owner, "node-"))
		if err != nil || i == not || i < 0 || i >= len(fc.nodes) {
			return false
		}
		select {
		case <-fc.nodes[i].exited:
			return false
		default:
		}
		p = i
		return fc.nodes[i].accepts()
	})
	return p
}

// term reads the lease's current term (the number of elections so far).
func (fc *failoverCluster) term() int64 {
	fc.t.Helper()
	var term int64
	waitFor(fc.t, "the lease row", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l, err := fc.admin.LeaseRead(ctx)
		term = l.Term
		return err == nil
	})
	return term
}

// repeat is what is known of a message the destination got more than once.
type repeat struct {
	id        string
	delivered []time.Time // at the destination
	// stored is when each copy was stored (its received_at, the
	// database's clock, as termStart is).
	stored []time.Time
	// termStart is when the current term began (the lease's acquired_at).
	termStart time.Time
	// failed is what went wrong with the partner's attempts without AA.
	failed []string
}

// byEngine reports whether the engine made the repeat in a clean
// switchover: a copy delivered twice (a delivery redone), or a copy the old
// primary stored and did not answer (the partner sent it again). The other
// kind, every copy stored in the new term, is a load balancer's: HAProxy
// sent the partner's message to the new primary (option redispatch, after
// the old one refused the connection) and, in the same instant, cut the
// session because the old node's check failed (on-marked-down
// shutdown-sessions), so the AA the new primary wrote went nowhere: each
// copy stored beyond the first is then the partner's resend after an
// attempt of its own that failed on the connection (not one the engine
// answered AE or AR), so such attempts must be at least as many.
func (r repeat) byEngine() bool {
	if len(r.delivered) > len(r.stored) {
		return true
	}
	cut := 0
	for _, f := range r.failed {
		if !strings.Contains(f, "answered ") {
			cut++
		}
	}
	if cut < len(r.stored)-1 {
		return true
	}
	for _, at := range r.stored {
		if at.Before(r.termStart) {
			return true
		}
	}
	return false
}

func (r repeat) String() string {
	f := func(ts []time.Time) []string {
		out := make([]string, len(ts))
		for i, t := range ts {
			out[i] = t.Format("15:04:05.000000")
		}
		return out
	}
	return fmt.Sprintf("%s: stored %v (the term began %s), delivered %v; the partner's attempts without AA: %q",
		r.id, f(r.stored), r.termStart.Format("15:04:05.000000"), f(r.delivered), r.failed)
}

// repeats reads, for each control ID, what the destination, the partner
// and the database know of it.
func (fc *failoverCluster) repeats(pt *partner, controlIDs []string) ([]repeat, error) {
	if len(controlIDs) == 0 {
		return nil, nil
	}
	rs := make([]repeat, len(controlIDs))
	index := map[string]int{}
	for i, id := range controlIDs {
		rs[i] = repeat{id: id, failed: pt.attempts(id)}
		index[id] = i
	}
	for _, r := range fc.dest.received() {
		if i, ok := index[r.ControlID]; ok {
			rs[i].delivered = append(rs[i].delivered, r.At)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fc.url)
	if err != nil {
		return rs, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT m.control_id, m.received_at, l.acquired_at
	  FROM mf_messages m CROSS JOIN mf_leader_lease l
	 WHERE m.control_id = ANY($1) ORDER BY m.id`, controlIDs)
	if err != nil {
		return rs, err
	}
	for rows.Next() {
		var (
			id                string
			stored, termStart time.Time
		)
		if err := rows.Scan(&id, &stored, &termStart); err != nil {
			return rs, err
		}
		i := index[id]
		rs[i].stored = append(rs[i].stored, stored)
		rs[i].termStart = termStart
	}
	return rs, rows.Err()
}

// settle is how long, and with how many AAs at least, a new primary must
// have acknowledged the partner's messages before a fault counts as over.
const (
	settle     = time.Second
	settleAcks = 50
)

// awaitRecovery waits for a primary other than not, then until the partner
// has had AAs through the VIP for settle since it was found; it returns the
// primary.
func (fc *failoverCluster) awaitRecovery(pt *partner, not int, timeout time.Duration) int {
	fc.t.Helper()
	q := fc.waitPrimary(not, timeout)
	t0 := time.Now()
	waitFor(fc.t, fmt.Sprintf("the partner to get AAs through the VIP for %v after node-%d became primary", settle, q), 60*time.Second, func() bool {
		n, last := pt.acksSince(t0)
		return n >= settleAcks && last.Sub(t0) >= settle
	})
	return q
}

// reportLogs keeps the logs of a fault: when it failed (or tellStory),
// each node's leadership story, HAProxy's view and the server's slow
// statements and checkpoints go to the test log; with
// MF_FAILOVER_DEBUG=dir, every node's whole log (each incarnation's) and
// HAProxy's are written to dir.
func (fc *failoverCluster) reportLogs() {
	dir := os.Getenv("MF_FAILOVER_DEBUG")
	tell := fc.t.Failed() || fc.tellStory
	if !tell && dir == "" {
		return
	}
	prefix := strings.ReplaceAll(fc.t.Name(), "/", "_")
	keep := func(name, logs string) {
		if dir == "" {
			return
		}
		if err := os.WriteFile(filepath.Join(dir, prefix+"-"+name+".log"), []byte(logs), 0o644); err != nil {
			fc.t.Logf("MF_FAILOVER_DEBUG: %v", err)
		}
	}
	for i, n := range fc.nodes {
		logs := fc.earlierLogs[i]
		if n.logs != nil {
			logs += n.logs.String()
		}
		keep(fmt.Sprintf("node-%d", i), logs)
		if tell {
			fc.t.Logf("--- node-%d (leadership, fencing, warnings, errors):\n%s", i,
				grepLines(logs, "leadership", "elected", "fence", "resign", `"level":"error"`, `"level":"warn"`))
		}
	}
	keep("haproxy", fc.vip.logs.String())
	if tell {
		fc.t.Logf("--- haproxy:\n%s", fc.vip.logs.String())
		fc.t.Logf("--- PostgreSQL (statements over 500 ms, checkpoints, since the cluster started):\n%s", fc.server.logSince(fc.serverLogFrom, "duration:", "checkpoint"))
	}
}

// checkRaces fails the fault if a node built with -race reported a data
// race: the process goes on running, so nothing else would notice.
func (fc *failoverCluster) checkRaces() {
	for i, n := range fc.nodes {
		logs := fc.earlierLogs[i]
		if n.logs != nil {
			logs += n.logs.String()
		}
		if at := strings.Index(logs, "WARNING: DATA RACE"); at >= 0 {
			fc.t.Errorf("node-%d reported a data race:\n%s", i, logs[at:min(len(logs), at+6000)])
		}
	}
}

// relaunch starts node i again (a new incarnation, as a standby), keeping
// the logs of the one before.
func (fc *failoverCluster) relaunch(i int) {
	fc.earlierLogs[i] += fc.nodes[i].logs.String()
	fc.nodes[i].launch()
}

// --- The partner ---------------------------------------------------------------

// The partner's shape and manners.
const (
	partnerLanes = 16
	partnerConns = 8
	// partnerAckTimeout is how long the partner waits for an ACK before it
	// drops the connection and resends elsewhere (through the VIP). Real
	// interfaces wait 30 s or more; 5 s keeps a frozen node's effect
	// visible without dominating the suite's time.
	partnerAckTimeout = 5 * time.Second
	// partnerRetryDelay is the pause before a resend after an AE or a
	// dropped connection (and between failed connects).
	partnerRetryDelay = 100 * time.Millisecond
)

// partner sends like a real partner behind the VIP: it connects to the VIP
// only, sends lock-step (one message outstanding per connection), resends
// a message until it gets AA for it, reconnecting when the connection
// drops or an ACK does not come. Lane l's messages (PID-3.1 "Lnn",
// MSH-10 "Lnn-seq", seq from 0 per lane) go over connection l % conns, in
// order, so a lane's order is its send order.
type partner struct {
	vip      string
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup

	mu sync.Mutex
	// aa[l][seq] is when seq of lane l got its AA. Lock-step per lane
	// makes it dense: len(aa[l]) messages of lane l are AA-acked.
	aa [][]time.Time
	// all is every AA's time in order (taken under mu, so sorted).
	all   []time.Time
	drops int // connections dropped or timed out with a message outstanding
	naks  int // AE or AR answers
	// failed is, per control ID, what went wrong with each attempt that
	// got no AA (the error or the ACK code, and when): a message stored
	// twice is explained by it.
	failed map[string][]string
}

// startPartner starts the partner; it stops at finish or when t ends.
func startPartner(t *testing.T, vipAddr string) *partner {
	pt := &partner{vip: vipAddr, stop: make(chan struct{}), aa: make([][]time.Time, partnerLanes), failed: map[string][]string{}}
	for k := range partnerConns {
		pt.done.Go(func() { pt.run(k) })
	}
	t.Cleanup(pt.finish)
	return pt
}

func laneName(l int) string           { return fmt.Sprintf("L%02d", l) }
func laneMessageID(l, seq int) string { return fmt.Sprintf("L%02d-%06d", l, seq) }
func (pt *partner) stopped() bool     { return isClosed(pt.stop) }
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// run is connection k: it sends its lanes' messages round robin, each
// until it gets AA for it.
func (pt *partner) run(k int) {
	var lanes []int
	for l := k; l < partnerLanes; l += partnerConns {
		lanes = append(lanes, l)
	}
	c := &partnerConn{vip: pt.vip}
	defer c.close()
	for i := 0; ; i++ {
		l := lanes[i%len(lanes)]
		pt.mu.Lock()
		seq := len(pt.aa[l])
		pt.mu.Unlock()
		id := laneMessageID(l, seq)
		msg := adt(id, laneName(l))
		for {
			if pt.stopped() {
				return
			}
			code, err := c.send(msg, id)
			if errors.Is(err, errNoConnection) {
				time.Sleep(partnerRetryDelay)
				continue
			}
			if err != nil { // the VIP dropped us, or no ACK in time
				c.close()
				pt.count(&pt.drops)
				pt.attemptFailed(id, err.Error())
				time.Sleep(partnerRetryDelay)
				continue
			}
			if code == hl7.AA {
				pt.mu.Lock()
				now := time.Now()
				pt.aa[l] = append(pt.aa[l], now)
				pt.all = append(pt.all, now)
				pt.mu.Unlock()
				break
			}
			// AE (the store failed, or the node is fenced): the message is
			// ours to resend.
			pt.count(&pt.naks)
			pt.attemptFailed(id, "answered "+string(code))
			time.Sleep(partnerRetryDelay)
		}
	}
}

func (pt *partner) attemptFailed(id, what string) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.failed[id] = append(pt.failed[id], time.Now().Format("15:04:05.000000")+" "+what)
}

// attempts returns what went wrong with id's attempts that got no AA.
func (pt *partner) attempts(id string) []string {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return slices.Clone(pt.failed[id])
}

func (pt *partner) count(n *int) {
	pt.mu.Lock()
	*n++
	pt.mu.Unlock()
}

// partnerConn is one of the partner's connections to the VIP, opened on
// demand.
type partnerConn struct {
	vip  string
	conn net.Conn
	fr   *hl7.FrameReader
}

// errNoConnection: the VIP could not be reached at all (nothing was sent).
var errNoConnection = errors.New("partner: cannot connect to the VIP")

// send sends msg and reads its ACK, which must answer id.
func (c *partnerConn) send(msg []byte, id string) (hl7.AckCode, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.vip, time.Second)
		if err != nil {
			return "", fmt.Errorf("%w: %v", errNoConnection, err)
		}
		c.conn, c.fr = conn, hl7.NewFrameReader(conn, 1<<20)
	}
	c.conn.SetDeadline(time.Now().Add(partnerAckTimeout))
	if err := hl7.WriteFrame(c.conn, msg); err != nil {
		return "", err
	}
	b, err := c.fr.ReadFrame()
	if err != nil {
		return "", err
	}
	ack, err := hl7.ParseAck(b)
	if err != nil {
		return "", err
	}
	if ack.ControlID != id {
		return "", fmt.Errorf("partner: ACK for %s while waiting for %s's", ack.ControlID, id)
	}
	return ack.Code, nil
}

func (c *partnerConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// finish stops the partner: no new message is sent, the attempts in hand
// end (within partnerAckTimeout), and messages not AA-acked by then stay
// unacknowledged.
func (pt *partner) finish() {
	pt.stopOnce.Do(func() { close(pt.stop) })
	pt.done.Wait()
}

func (pt *partner) ackedCount() int {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return len(pt.all)
}

// acksSince counts the AAs after t0 and returns the last one's time.
func (pt *partner) acksSince(t0 time.Time) (int, time.Time) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	i := sort.Search(len(pt.all), func(i int) bool { return pt.all[i].After(t0) })
	if i == len(pt.all) {
		return 0, time.Time{}
	}
	return len(pt.all) - i, pt.all[len(pt.all)-1]
}

// ackedPerLane is how many messages of each lane are AA-acked (seq 0 to
// n-1).
func (pt *partner) ackedPerLane() []int {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	out := make([]int, len(pt.aa))
	for l := range pt.aa {
		out[l] = len(pt.aa[l])
	}
	return out
}

// aaTimes is every AA's time, in order.
func (pt *partner) aaTimes() []time.Time {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return slices.Clone(pt.all)
}

// --- Figures --------------------------------------------------------------------

// outage is the partner's longest wait for an AA around a fault: the
// largest gap between consecutive AAs, from the last AA before the fault
// instant to the first after it, or a later gap that ends by the end of the
// fault's window (a fault can have a second act: the resumed node of a
// SIGSTOP). A gap that runs past the window's end belongs to the next fault.
type outage struct {
	From, To time.Time // the AAs that bound the gap
}

func (o outage) length() time.Duration { return o.To.Sub(o.From) }

// largestGap finds the outage of a fault at instant fault in the AA times
// aa (sorted), looking at gaps that end by end; ok is false when no AA came
// after the fault.
func largestGap(aa []time.Time, fault, end time.Time) (o outage, ok bool) {
	i := sort.Search(len(aa), func(i int) bool { return aa[i].After(fault) })
	if i == 0 || i == len(aa) {
		return outage{}, false
	}
	o = outage{aa[i-1], aa[i]}
	for j := i + 1; j < len(aa) && !aa[j].After(end); j++ {
		if g := (outage{aa[j-1], aa[j]}); g.length() > o.length() {
			o = g
		}
	}
	return o, true
}

// connectionAATimes is, per partner connection, the times of its AAs in
// order (a connection's lanes are l % partnerConns == k).
func (pt *partner) connectionAATimes() [][]time.Time {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	out := make([][]time.Time, partnerConns)
	for l, ts := range pt.aa {
		out[l%partnerConns] = append(out[l%partnerConns], ts...)
	}
	for _, ts := range out {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	}
	return out
}

// deliveries is what the sink shows about the partner's messages.
type deliveries struct {
	Acked, Delivered int
	// Lost: AA-acked, never delivered.
	Lost int
	// Reordered: first deliveries of a seq lower than one already delivered
	// in its lane.
	Reordered int
	// Duplicates: deliveries beyond the first of a seq; Adjacent of them
	// repeat the delivery right before them in the lane (the head in
	// flight at a fault, or a message committed whose AA never reached the
	// partner, which then resent it).
	Duplicates, Adjacent int
	// Foreign: deliveries of messages the partner never sent.
	Foreign int
	// Repeated: control IDs of the messages delivered more than once,
	// to explain each from the database.
	Repeated []string
	// Skipped: AA-acked, never delivered, set aside by an operator's skip.
	Skipped int
	// Examples of each problem, for the failure message.
	Examples []string
	// Problems are the breaches one by one (lane, message, arrival), for
	// the chaos run to show the events around each.
	Problems []problem
}

// problem is one breach of the delivery contracts: Kind "lost" (At zero:
// never arrived), a repeat that is not of the delivery just before, or a
// first delivery after a later seq.
type problem struct {
	Lane int
	ID   string
	Kind string
	At   time.Time
}

func (d deliveries) inFlightOnly() bool { return d.Duplicates == d.Adjacent }

// breaches says which delivery contracts d shows broken, for the suite's
// failure: a message AA-acked and lost, reordered within its lane, one
// never sent, or a duplicate that is not the lane's delivery just before.
func (d deliveries) breaches() []string {
	var out []string
	if d.Lost > 0 || d.Reordered > 0 || d.Foreign > 0 {
		out = append(out, fmt.Sprintf("%d AA-acked messages lost, %d reordered, %d never sent; e.g.:\n%s", d.Lost, d.Reordered, d.Foreign, strings.Join(d.Examples, "\n")))
	}
	if !d.inFlightOnly() {
		out = append(out, fmt.Sprintf("%d of %d duplicates are not repeats of the lane's delivery just before (rows in flight); e.g.:\n%s",
			d.Duplicates-d.Adjacent, d.Duplicates, strings.Join(d.Examples, "\n")))
	}
	return out
}

// checkDeliveries compares what the sink got, in arrival order, with what
// the partner had AA-acked.
func checkDeliveries(got []received, acked []int) deliveries {
	return checkDeliveriesSkipping(got, acked, nil)
}

// checkDeliveriesSkipping is checkDeliveries where an operator skipped the
// messages whose control IDs skipped holds (POST /queue/{id}/skip sets a
// lane's head aside, dead): such a message AA-acked and never delivered is
// skipped, not lost.
func checkDeliveriesSkipping(got []received, acked []int, skipped map[string]bool) deliveries {
	d := deliveries{}
	for _, n := range acked {
		d.Acked += n
	}
	seen := make([]map[int]bool, len(acked))
	// answered: a copy was acknowledged; only that delivers a message (a
	// copy taken and never answered must be sent again).
	answered := make([]map[int]bool, len(acked))
	highest := make([]int, len(acked))
	last := make([]int, len(acked))
	for l := range acked {
		seen[l], answered[l], highest[l], last[l] = map[int]bool{}, map[int]bool{}, -1, -1
	}
	example := func(format string, args ...any) {
		if len(d.Examples) < 10 {
			d.Examples = append(d.Examples, fmt.Sprintf(format, args...))
		}
	}
	for _, r := range got {
		d.Delivered++
		ls, ss, ok := strings.Cut(r.ControlID, "-")
		l, err1 := strconv.Atoi(strings.TrimPrefix(ls, "L"))
		seq, err2 := strconv.Atoi(ss)
		if !ok || err1 != nil || err2 != nil || l < 0 || l >= len(acked) || r.Patient != laneName(l) {
			d.Foreign++
			example("never sent: %s (PID-3.1 %s)", r.ControlID, r.Patient)
			continue
		}
		if seen[l][seq] && !slices.Contains(d.Repeated, r.ControlID) {
			d.Repeated = append(d.Repeated, r.ControlID)
		}
		switch {
		case seen[l][seq] && last[l] == seq:
			d.Duplicates++
			d.Adjacent++
		case seen[l][seq]:
			d.Duplicates++
			d.Problems = append(d.Problems, problem{Lane: l, ID: r.ControlID, Kind: fmt.Sprintf("again after seq %d", last[l]), At: r.At})
			example("lane %s: %s again after seq %d", laneName(l), r.ControlID, last[l])
		case seq < highest[l]:
			d.Reordered++
			d.Problems = append(d.Problems, problem{Lane: l, ID: r.ControlID, Kind: fmt.Sprintf("first delivered after seq %d", highest[l]), At: r.At})
			example("lane %s: %s first delivered after seq %d", laneName(l), r.ControlID, highest[l])
		}
		seen[l][seq] = true
		answered[l][seq] = answered[l][seq] || !r.Unanswered
		highest[l] = max(highest[l], seq)
		last[l] = seq
	}
	for l, n := range acked {
		for seq := range n {
			if !answered[l][seq] && skipped[laneMessageID(l, seq)] {
				d.Skipped++
			} else if !answered[l][seq] {
				d.Lost++
				d.Problems = append(d.Problems, problem{Lane: l, ID: laneMessageID(l, seq), Kind: "lost"})
				example("lost: %s (AA-acked)", laneMessageID(l, seq))
			}
		}
	}
	return d
}

// allDelivered reports whether every AA-acked message reached the sink.
func allDelivered(got []received, acked []int) bool {
	return checkDeliveries(got, acked).Lost == 0
}

// --- The report -------------------------------------------------------------------

// faultResult is one fault's figures: a row of the suite's table and a JSON
// line of MF_FAILOVER_REPORT.
type faultResult struct {
	Fault  string   `json:"fault"`
	Timing string   `json:"timing"` // heartbeat/fence/ttl
	Check  vipCheck `json:"vip_check"`
	Nodes  int      `json:"nodes"`
	Race   bool     `json:"race"`
	Cycles int      `json:"cycles"`
	// Elections is how many terms began during the fault: one per
	// failover; more is leadership flapping, none a fault ridden out
	// by the same primary.
	Elections int64 `json:"elections"`
	// OutageSeconds is the outage at the VIP (the largest over the cycles),
	// OutageMedianSeconds the median over the cycles, OutageStartSeconds
	// when the largest began relative to its fault instant (the last AA
	// before it: negative).
	OutageSeconds       float64 `json:"outage_seconds"`
	OutageMedianSeconds float64 `json:"outage_median_seconds"`
	OutageStartSeconds  float64 `json:"outage_start_seconds"`
	// ConnectionWaitSeconds is the longest any one partner connection went
	// without an AA around a fault: what the unluckiest interface saw.
	ConnectionWaitSeconds float64 `json:"connection_wait_seconds"`
	TargetSeconds         float64 `json:"target_seconds,omitempty"`
	Acked                 int     `json:"acked"`
	Delivered             int     `json:"delivered"`
	Lost                  int     `json:"lost"`
	Reordered             int     `json:"reordered"`
	Duplicates            int     `json:"duplicates"`
	DuplicatesInFlight    bool    `json:"duplicates_in_flight_only"`
	// PartnerDrops counts the partner's attempts that ended without any
	// ACK: a dropped connection, no ACK within partnerAckTimeout, or the
	// VIP closing the connection because no node was up (the partner then
	// retries every partnerRetryDelay on each connection).
	PartnerDrops int     `json:"partner_drops"`
	PartnerNaks  int     `json:"partner_aes"`
	From         string  `json:"old_primary"`
	To           string  `json:"new_primary"`
	Note         string  `json:"note,omitempty"`
	Seconds      float64 `json:"test_seconds"`
}

// appendReport appends r as a JSON line to the file MF_FAILOVER_REPORT
// names, if any.
func appendReport(t *testing.T, r faultResult) {
	t.Helper()
	path := os.Getenv("MF_FAILOVER_REPORT")
	if path == "" {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("MF_FAILOVER_REPORT: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Errorf("MF_FAILOVER_REPORT: %v", err)
	}
}

// failoverTable formats the results as the suite's closing table.
func failoverTable(rs []faultResult) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "fault\ttiming\tcheck\toutage\t(median)\ttarget\tconn wait\telections\tacked\tlost\treordered\tdup\tdup in-flight only\tdrops\tAE\tprimary\tnote")
	secs := func(s float64) string { return strconv.FormatFloat(s, 'f', 3, 64) + "s" }
	for _, r := range rs {
		target, median := "-", "-"
		if r.TargetSeconds > 0 {
			target = "< " + strconv.FormatFloat(r.TargetSeconds, 'f', -1, 64) + "s"
		}
		if r.Cycles > 1 {
			median = secs(r.OutageMedianSeconds)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%v\t%d\t%d\t%s→%s\t%s\n",
			r.Fault, r.Timing, r.Check, secs(r.OutageSeconds), median, target, secs(r.ConnectionWaitSeconds), r.Elections, r.Acked, r.Lost, r.Reordered,
			r.Duplicates, r.DuplicatesInFlight, r.PartnerDrops, r.PartnerNaks, r.From, r.To, r.Note)
	}
	w.Flush()
	return b.String()
}
