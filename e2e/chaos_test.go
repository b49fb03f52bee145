package e2e

// The chaos run: the failover suite's pieces (a private PostgreSQL, HAProxy
// as the VIP, the partner) with faults that overlap, at seeded random
// moments, and operator actions among them.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage/postgres"
)

// TestFailoverChaos runs three nodes behind HAProxy with the partner
// sending, and at seeded random moments: kill -9, SIGTERM or SIGSTOP (then
// SIGCONT) of a node, the primary more often; a node's database connections
// cut; the PostgreSQL server restarted; mf reload of a harmless change; the destination refusing
// connections, or taking messages without acknowledging them; a lane's
// messages refused by the destination (AR, which blocks the lane at once,
// or AE, which blocks it after max_attempts), and an operator retrying or
// skipping the blocked head through the API. Faults overlap: the next one
// does not wait for the last one's failover. At the end every fault is
// undone, everything drains, and the verdict is the failover suite's: no
// AA-acked message lost (one an operator skipped is accounted for), none
// reordered in its lane, duplicates only of the delivery just before.
//
//	MF_FAILOVER=1 go test -run FailoverChaos -v ./e2e/
//	MF_FAILOVER=1 MF_CHAOS_SECONDS=1200 MF_CHAOS_SEED=42 go test -run FailoverChaos -timeout 40m -v ./e2e/
//
// MF_CHAOS_SECONDS is how long faults are injected (default 50);
// MF_CHAOS_SEED replays a run's choices (it is printed; a replay makes the
// same choices at the same offsets, while what the engine does in between
// depends on timing). MF_CHAOS_EVENTS=file writes the run's events to file
// as they happen (else they are logged when the run fails).
func TestFailoverChaos(t *testing.T) {
	failoverGate(t)
	haproxyBin(t)
	budget := 50 * time.Second
	if s := os.Getenv("MF_CHAOS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MF_CHAOS_SECONDS=%q: want a positive number of seconds", s)
		}
		budget = time.Duration(n) * time.Second
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MF_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("MF_CHAOS_SEED=%q: want an unsigned integer", s)
		}
		seed = n
	}
	t.Logf("chaos seed %d, %v of faults (replay: MF_CHAOS_SEED=%d MF_CHAOS_SECONDS=%d)", seed, budget, seed, int(budget.Seconds()))
	pg := startPrivatePG(t)
	runChaos(t, pg, seed, budget)
}

// chaosEvents is the run's timeline: every fault, undo, operator action and
// election, to show around a breach.
type chaosEvents struct {
	mu     sync.Mutex
	t0     time.Time
	events []chaosEvent
	counts map[string]int
	// file, if set (MF_CHAOS_EVENTS), gets each event as it happens, so
	// that a run that hangs can be read while it does.
	file *os.File
}

type chaosEvent struct {
	at   time.Time
	what string
}

func (ev *chaosEvents) add(kind, format string, args ...any) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	e := chaosEvent{time.Now(), kind + ": " + fmt.Sprintf(format, args...)}
	ev.events = append(ev.events, e)
	if ev.file != nil {
		fmt.Fprintln(ev.file, ev.line(e))
	}
	if ev.counts == nil {
		ev.counts = map[string]int{}
	}
	ev.counts[kind]++
}

func (ev *chaosEvents) line(e chaosEvent) string {
	return fmt.Sprintf("%s (+%7.3fs) %s", e.at.Format("15:04:05.000"), e.at.Sub(ev.t0).Seconds(), e.what)
}

// around is the events from before to after at.
func (ev *chaosEvents) around(at time.Time, before, after time.Duration) string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var b strings.Builder
	for _, e := range ev.events {
		if !e.at.Before(at.Add(-before)) && !e.at.After(at.Add(after)) {
			b.WriteString("    " + ev.line(e) + "\n")
		}
	}
	return b.String()
}

func (ev *chaosEvents) all() string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var b strings.Builder
	for _, e := range ev.events {
		b.WriteString(ev.line(e) + "\n")
	}
	return b.String()
}

func (ev *chaosEvents) summary() string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var kinds []string
	for k := range ev.counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, ev.counts[k]))
	}
	return strings.Join(parts, ", ")
}

// chaosSink is the destination: an MLLP receiver on a fixed address that
// can go down (its port closed: connections refused), stall (it reads
// messages and answers none: each is recorded, as a destination that took
// it and whose ACK was lost), and refuse a lane's messages (AR or AE, not
// recorded).
type chaosSink struct {
	t    testing.TB
	addr string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]bool
	got     []received
	stalled bool
	refuse  map[string]hl7.AckCode // patient (lane key) → the answer
}

func startChaosSink(t testing.TB) *chaosSink {
	s := &chaosSink{t: t, addr: freePort(t), conns: map[net.Conn]bool{}, refuse: map[string]hl7.AckCode{}}
	if err := s.up(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.down)
	return s
}

// up opens the port (again).
func (s *chaosSink) up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	s.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			go s.serve(c)
		}
	}()
	return nil
}

// down closes the port and every connection.
func (s *chaosSink) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
}

func (s *chaosSink) setStalled(v bool) {
	s.mu.Lock()
	s.stalled = v
	s.mu.Unlock()
}

func (s *chaosSink) setRefuse(patient string, code hl7.AckCode) {
	s.mu.Lock()
	if code == "" {
		delete(s.refuse, patient)
	} else {
		s.refuse[patient] = code
	}
	s.mu.Unlock()
}

func (s *chaosSink) serve(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	fr := hl7.NewFrameReader(bufio.NewReader(c), 1<<20)
	for {
		b, err := fr.ReadFrame()
		if err != nil {
			return
		}
		m, err := hl7.Parse(b)
		if err != nil {
			s.t.Errorf("the sink got an unparsable message: %v", err)
			return
		}
		rec := received{ControlID: m.ControlID(), Patient: m.Get(mustPath("PID-3.1")), At: time.Now()}
		s.mu.Lock()
		code, refused := s.refuse[rec.Patient]
		stalled := s.stalled
		rec.Unanswered = stalled
		if !refused {
			s.got = append(s.got, rec)
		}
		s.mu.Unlock()
		if stalled {
			continue // taken, never answered: the sender times out
		}
		if !refused {
			code = hl7.AA
		}
		if err := hl7.WriteFrame(c, hl7.Ack(m, code, "")); err != nil {
			return
		}
	}
}

func (s *chaosSink) received() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// chaosNode is what the run knows of a node between its actions.
type chaosNode struct {
	dead    bool      // killed or stopped (or exited), not relaunched yet
	frozen  bool      // SIGSTOPped
	cut     bool      // its database connections cut
	expect  bool      // its exit is the run's doing (kill, SIGTERM)
	termAt  time.Time // the SIGTERM's instant, for its exit's deadline
	watched chan struct{}
}

// chaos is one chaos run.
type chaos struct {
	t      *testing.T
	rng    *rand.Rand
	fc     *failoverCluster
	sink   *chaosSink
	pt     *partner
	ev     *chaosEvents
	state  []*chaosNode
	undo   []chaosUndo
	reload string // the config file mf reload is given

	mu       sync.Mutex
	running  []bool          // the nodes the operator may ask (not dead, not frozen)
	skipped  map[string]bool // control IDs of the rows an operator skipped
	failures []string        // breaches of the run's own: an unexpected exit, a SIGTERM not obeyed
	reloadV  int             // reloads done (the config's retry_max_seconds alternates)
	wg       sync.WaitGroup
}

// chaosUndo is an action due later: a SIGCONT, a relaunch, a restore.
type chaosUndo struct {
	at   time.Time
	what string
	do   func()
}

func runChaos(t *testing.T, pg *privatePG, seed uint64, budget time.Duration) {
	began := time.Now()
	c := &chaos{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ev: &chaosEvents{t0: began}, skipped: map[string]bool{}}
	if path := os.Getenv("MF_CHAOS_EVENTS"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatalf("MF_CHAOS_EVENTS: %v", err)
		}
		t.Cleanup(func() { f.Close() })
		c.ev.file = f
	}
	c.sink = startChaosSink(t)
	c.fc = startChaosCluster(t, pg, 3, c.sink.addr)
	for range c.fc.nodes {
		c.state = append(c.state, &chaosNode{})
	}
	c.running = []bool{true, true, true}
	c.writeReloadConfig()
	c.pt = startPartner(t, c.fc.vip.addr)
	waitFor(t, "the partner's first AAs through the VIP", 30*time.Second, func() bool {
		n, last := c.pt.acksSince(began)
		return n >= settleAcks && time.Since(last) < time.Second
	})

	stop := make(chan struct{})
	c.wg.Go(func() { c.watchLease(stop) })
	c.wg.Go(func() { c.operate(stop) })
	c.ev.add("start", "seed %d, %v of faults", seed, budget)
	c.inject(budget)
	c.ev.add("end", "faults over: undoing every one")
	c.undoAll()

	// The cluster must serve again, and every blocked lane be released.
	p := c.fc.waitPrimary(-1, 2*time.Minute)
	c.fc.awaitRecovery(c.pt, -1, recoveryTimeout(c.fc.timing))
	c.pt.finish()
	acked := c.pt.ackedPerLane()
	c.ev.add("end", "the partner stopped: primary node-%d, %d AA-acked", p, c.pt.ackedCount())
	drained := pollUntil(3*time.Minute, 500*time.Millisecond, func() bool {
		c.mu.Lock()
		skipped := maps2(c.skipped)
		c.mu.Unlock()
		return checkDeliveriesSkipping(c.sink.received(), acked, skipped).Lost == 0 && c.fc.queueEmpty()
	})
	n := -1
	pollUntil(30*time.Second, 500*time.Millisecond, func() bool {
		m := len(c.sink.received())
		quiet := m == n
		n = m
		return quiet
	})
	close(stop)
	c.wg.Wait()

	c.mu.Lock()
	skipped := maps2(c.skipped)
	failures := slices.Clone(c.failures)
	c.mu.Unlock()
	got := c.sink.received()
	d := checkDeliveriesSkipping(got, acked, skipped)
	c.pt.mu.Lock()
	drops, naks := c.pt.drops, c.pt.naks
	c.pt.mu.Unlock()
	r := faultResult{
		Fault: "chaos", Timing: "1/2/3s", Check: checkTCP, Nodes: 3, Race: raceEnabled,
		Elections: int64(c.ev.counts["election"]), Acked: d.Acked, Delivered: d.Delivered, Lost: d.Lost,
		Reordered: d.Reordered, Duplicates: d.Duplicates, DuplicatesInFlight: d.inFlightOnly(),
		PartnerDrops: drops, PartnerNaks: naks, Seconds: time.Since(began).Seconds(),
		Note: fmt.Sprintf("seed %d, %v of faults; %d skipped by the operator; %s", seed, budget, d.Skipped, c.ev.summary()),
	}
	appendReport(t, r)
	t.Logf("chaos seed %d: %v of faults, %v in all; %s; %d AA-acked, %d delivered: %d lost, %d skipped by the operator, %d reordered, %d duplicates (in flight only: %v); partner drops %d, AEs %d",
		seed, budget, time.Since(began).Round(time.Second), c.ev.summary(), d.Acked, d.Delivered, d.Lost, d.Skipped, d.Reordered, d.Duplicates, d.inFlightOnly(), drops, naks)

	if !drained {
		t.Errorf("seed %d: the queue did not drain within 3 minutes of the last fault's undoing (lanes: %s)", seed, c.lanesText())
	}
	for _, f := range failures {
		t.Errorf("seed %d: %s", seed, f)
	}
	if b := d.breaches(); len(b) > 0 {
		for _, x := range b {
			t.Errorf("seed %d: %s", seed, x)
		}
		c.explain(d, got)
	}
	if t.Failed() && c.ev.file == nil {
		t.Logf("every event of seed %d:\n%s", seed, c.ev.all())
	}
}

func maps2(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// explain prints, for each breach (up to 10), its lane, the message, the
// lane's deliveries around it and the events around it.
func (c *chaos) explain(d deliveries, got []received) {
	for i, p := range d.Problems {
		if i == 10 {
			c.t.Logf("... and %d more breaches", len(d.Problems)-10)
			break
		}
		at := p.At
		if at.IsZero() { // lost: around its AA
			seq, _ := strconv.Atoi(strings.TrimPrefix(p.ID, laneName(p.Lane)+"-"))
			c.pt.mu.Lock()
			if seq < len(c.pt.aa[p.Lane]) {
				at = c.pt.aa[p.Lane][seq]
			}
			c.pt.mu.Unlock()
		}
		var lane []string
		for _, r := range got {
			if r.Patient == laneName(p.Lane) && r.At.After(at.Add(-10*time.Second)) && r.At.Before(at.Add(5*time.Second)) {
				lane = append(lane, r.At.Format("15:04:05.000")+" "+r.ControlID)
			}
		}
		c.t.Logf("breach: lane %s, %s %s (at %s); the partner's failed attempts %q\n  the lane's deliveries from 10 s before to 5 s after:\n    %s\n  events from 10 s before to 5 s after:\n%s",
			laneName(p.Lane), p.ID, p.Kind, at.Format("15:04:05.000"), c.pt.attempts(p.ID), strings.Join(lane, "\n    "), c.ev.around(at, 10*time.Second, 5*time.Second))
	}
}

// startChaosCluster is startFailoverCluster with the chaos run's config: an
// operator token, a destination that gives up after 5 attempts and blocks
// its lane (on_exhausted = "block"), the sink's address, every listener in
// the run's port band.
func startChaosCluster(t *testing.T, pg *privatePG, n int, sinkAddr string) *failoverCluster {
	t.Helper()
	url := pg.createDB(t, fmt.Sprintf("mf_chaos_%d", failoverDBs.Add(1)))
	sum := sha256.Sum256([]byte(operatorToken))
	opSHA := hex.EncodeToString(sum[:])
	fc := &failoverCluster{cluster: &cluster{t: t, url: url, timing: quick, dest: startReceiver(t, freePort(t))}, server: pg}
	fc.edit = func(id, cfg string) string {
		cfg = strings.Replace(cfg, `address = "`+fc.dest.addr()+`"`, `address = "`+sinkAddr+`"`, 1)
		cfg = strings.Replace(cfg, "retry_max_seconds = 0.5\n", "retry_max_seconds = 0.5\nmax_attempts = 5\non_exhausted = \"block\"\n", 1)
		return strings.Replace(cfg, `sha256 = "`+viewerTokenSHA+`"`+"\n",
			`sha256 = "`+viewerTokenSHA+`"`+"\n[[api.tokens]]\nname = \"operator\"\nrole = \"operator\"\nsha256 = \""+opSHA+"\"\n", 1)
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
		px := enginetest.StartProxyAt(t, freePort(t), pg.addr())
		fc.proxies = append(fc.proxies, px)
		fc.addNode(px.Via(t, url))
	}
	fc.vip = startVIP(t, fc.nodes, checkTCP)
	fc.earlierLogs = make([]string, n)
	t.Cleanup(fc.reportLogs)
	t.Cleanup(fc.checkRaces)
	p := fc.waitPrimary(-1, 60*time.Second)
	waitFor(t, "HAProxy to route to the primary only", 10*time.Second, func() bool {
		return slices.Equal(fc.vip.up(), []string{fmt.Sprintf("node-%d", p)})
	})
	return fc
}

// writeReloadConfig writes the file mf reload is given: node-0's, with the
// database's own address (a node's proxy may be cut).
func (c *chaos) writeReloadConfig() {
	b, err := os.ReadFile(c.fc.nodes[0].config)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := strings.Replace(string(b), c.fc.proxies[0].Via(c.t, c.fc.url), c.fc.url, 1)
	c.reload = filepath.Join(c.t.TempDir(), "reload.toml")
	if err := os.WriteFile(c.reload, []byte(cfg), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// inject runs faults for budget.
func (c *chaos) inject(budget time.Duration) {
	end := time.Now().Add(budget)
	next := time.Now().Add(c.between())
	for time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
		c.runUndos(false)
		c.watchExits()
		if time.Now().Before(next) {
			continue
		}
		c.fault()
		next = time.Now().Add(c.between())
	}
}

// between is the pause before the next fault: often shorter than a
// failover (the lease TTL is 3 s), so faults overlap.
func (c *chaos) between() time.Duration {
	return time.Duration(300+c.rng.IntN(3700)) * time.Millisecond
}

// dur is a fault's length, from lo to hi seconds.
func (c *chaos) dur(lo, hi float64) time.Duration {
	return time.Duration((lo + c.rng.Float64()*(hi-lo)) * float64(time.Second))
}

func (c *chaos) later(d time.Duration, what string, do func()) {
	c.undo = append(c.undo, chaosUndo{at: time.Now().Add(d), what: what, do: do})
}

// runUndos runs the undos that are due (all of them with all).
func (c *chaos) runUndos(all bool) {
	sort.SliceStable(c.undo, func(i, j int) bool { return c.undo[i].at.Before(c.undo[j].at) })
	for len(c.undo) > 0 && (all || !c.undo[0].at.After(time.Now())) {
		u := c.undo[0]
		c.undo = c.undo[1:]
		u.do()
	}
}

// undoAll ends every fault: a frozen node resumes, a cut is restored, a
// dead node relaunched, the sink serves everything.
func (c *chaos) undoAll() {
	c.runUndos(true)
	for i, s := range c.state {
		if s.termAt != (time.Time{}) {
			c.awaitExit(i)
		}
	}
	c.runUndos(true)
	c.watchExits()
	c.runUndos(true)
	c.sink.setStalled(false)
	c.sink.mu.Lock()
	clear(c.sink.refuse)
	c.sink.mu.Unlock()
	if err := c.sink.up(); err != nil {
		c.t.Fatal(err)
	}
}

// primary is the lease's owner now, -1 if none can be read.
func (c *chaos) primary() int {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	l, err := c.fc.admin.LeaseRead(ctx)
	if err != nil || l.Remaining() <= 0 {
		return -1
	}
	i, err := strconv.Atoi(strings.TrimPrefix(l.Owner, "node-"))
	if err != nil {
		return -1
	}
	return i
}

// able reports whether node i is up, unfrozen and reaches the database.
func (c *chaos) able(i int) bool {
	s := c.state[i]
	return !s.dead && !s.frozen && !s.cut
}

// pickNode picks the node of a fault that takes a node out: the primary two
// times in three, else another able node; -1 when the fault would leave no
// able node.
func (c *chaos) pickNode() int {
	var able []int
	for i := range c.state {
		if c.able(i) {
			able = append(able, i)
		}
	}
	if len(able) < 2 {
		return -1
	}
	if p := c.primary(); p >= 0 && c.able(p) && c.rng.IntN(3) < 2 {
		return p
	}
	return able[c.rng.IntN(len(able))]
}

func (c *chaos) setRunning(i int, v bool) {
	c.mu.Lock()
	c.running[i] = v
	c.mu.Unlock()
}

// fault injects one fault, chosen at random.
func (c *chaos) fault() {
	type choice struct {
		weight int
		do     func()
	}
	choices := []choice{
		{6, c.kill},
		{3, c.sigterm},
		{3, c.freeze},
		{3, c.cutDB},
		{2, c.reloadConfig},
		{2, c.sinkDown},
		{2, c.sinkStall},
		{4, c.refuseLane},
		{1, c.restartPG},
	}
	total := 0
	for _, ch := range choices {
		total += ch.weight
	}
	n := c.rng.IntN(total)
	for _, ch := range choices {
		if n < ch.weight {
			ch.do()
			return
		}
		n -= ch.weight
	}
}

func (c *chaos) role(i int) string {
	if i == c.primary() {
		return "primary"
	}
	return "standby"
}

// kill sends SIGKILL to a node, sometimes one already frozen or cut off
// (a fault on a fault), and relaunches it later.
func (c *chaos) kill() {
	i := c.pickNode()
	if c.rng.IntN(4) == 0 { // any node not dead: maybe the frozen or cut one
		var alive []int
		for j, s := range c.state {
			if !s.dead {
				alive = append(alive, j)
			}
		}
		if len(alive) > 0 {
			i = alive[c.rng.IntN(len(alive))]
		}
	}
	if i < 0 {
		return
	}
	s := c.state[i]
	c.ev.add("kill-9", "node-%d (%s%s%s)", i, c.role(i), cond(s.frozen, ", frozen"), cond(s.cut, ", database cut"))
	s.expect = true
	c.fc.nodes[i].kill()
	s.dead, s.frozen = true, false
	c.setRunning(i, false)
	c.later(c.dur(0.5, 5), "relaunch", func() { c.relaunch(i) })
}

func cond(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

// endedBySIGTERMBeforeItsHandler reports whether a node's process was
// ended by SIGTERM's default action before it logged anything: mf run
// installs its handler before its first line, so a node that logged one
// must stop on SIGTERM and exit 0.
func endedBySIGTERMBeforeItsHandler(e *engine) bool {
	ws, ok := e.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM && e.logs.String() == ""
}

func (c *chaos) relaunch(i int) {
	s := c.state[i]
	if !s.dead {
		return
	}
	c.fc.relaunch(i)
	s.dead, s.expect, s.termAt, s.watched = false, false, time.Time{}, nil
	c.setRunning(i, true)
	c.ev.add("relaunch", "node-%d%s", i, cond(s.cut, " (its database still cut)"))
}

// sigterm stops a node cleanly; it must exit 0 within 60 s (it drains what
// it has in hand), then is relaunched.
func (c *chaos) sigterm() {
	i := c.pickNode()
	if i < 0 {
		return
	}
	s := c.state[i]
	c.ev.add("sigterm", "node-%d (%s%s)", i, c.role(i), cond(s.cut, ", database cut"))
	s.expect, s.termAt = true, time.Now()
	c.fc.nodes[i].cmd.Process.Signal(syscall.SIGTERM)
	s.dead = true
	c.setRunning(i, false)
}

// freeze SIGSTOPs a node for 0.5 to 10 s (past the TTL of 3 s, often).
func (c *chaos) freeze() {
	i := c.pickNode()
	if i < 0 {
		return
	}
	d := c.dur(0.5, 10)
	c.ev.add("sigstop", "node-%d (%s) for %v", i, c.role(i), d.Round(time.Millisecond))
	c.fc.nodes[i].cmd.Process.Signal(syscall.SIGSTOP)
	c.state[i].frozen = true
	c.setRunning(i, false)
	e := c.fc.nodes[i]
	cmd := e.cmd
	c.later(d, "sigcont", func() {
		if !c.state[i].frozen || e.cmd != cmd {
			return // killed meanwhile
		}
		cmd.Process.Signal(syscall.SIGCONT)
		c.state[i].frozen = false
		c.setRunning(i, true)
		c.ev.add("sigcont", "node-%d", i)
	})
}

// cutDB cuts a node's database connections for 0.5 to 10 s.
func (c *chaos) cutDB() {
	i := c.pickNode()
	if i < 0 {
		return
	}
	d := c.dur(0.5, 10)
	c.ev.add("db-cut", "node-%d (%s) for %v", i, c.role(i), d.Round(time.Millisecond))
	c.fc.proxies[i].Cut()
	c.state[i].cut = true
	c.later(d, "db-restore", func() {
		c.fc.proxies[i].Restore(c.t)
		c.state[i].cut = false
		c.ev.add("db-restore", "node-%d", i)
	})
}

// restartPG restarts the PostgreSQL server under every node (pg_ctl
// restart, -m fast or immediate), whatever else is going on.
func (c *chaos) restartPG() {
	mode := "fast"
	if c.rng.IntN(2) == 0 {
		mode = "immediate"
	}
	c.ev.add("pg-restart", "-m %s", mode)
	t0 := time.Now()
	c.fc.server.restart(c.t, mode)
	c.ev.add("pg-up", "after %v", time.Since(t0).Round(time.Millisecond))
}

// reloadConfig changes retry_max_seconds (0.5 ↔ 0.6) in every node's file
// and runs mf reload, in the background: its outcome is an event (a dead
// or frozen node does not report the new version; that is no breach).
func (c *chaos) reloadConfig() {
	c.mu.Lock()
	c.reloadV++
	v := c.reloadV
	c.mu.Unlock()
	from, to := "retry_max_seconds = 0.5\n", "retry_max_seconds = 0.6\n"
	if v%2 == 0 {
		from, to = to, from
	}
	for _, path := range append([]string{c.reload}, nodeConfigs(c.fc)...) {
		b, err := os.ReadFile(path)
		if err != nil {
			c.t.Fatal(err)
		}
		// Written whole and renamed: a node reading its file mid-write
		// would see half of it.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strings.Replace(string(b), from, to, 1)), 0o600); err != nil {
			c.t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			c.t.Fatal(err)
		}
	}
	c.ev.add("reload", "#%d: %s", v, strings.TrimSpace(to))
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, mfBin, "reload", "--config", c.reload, "--wait", "10s").CombinedOutput()
		last := strings.TrimSpace(string(out))
		if i := strings.LastIndex(last, "\n"); i >= 0 {
			last = last[i+1:]
		}
		c.ev.add("reload-done", "#%d: %v: %s", v, errOr(err, "exit 0"), last)
	})
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

func nodeConfigs(fc *failoverCluster) []string {
	var out []string
	for _, n := range fc.nodes {
		out = append(out, n.config)
	}
	return out
}

// sinkDown closes the destination's port for 0.5 to 8 s.
func (c *chaos) sinkDown() {
	d := c.dur(0.5, 8)
	c.ev.add("sink-down", "refusing connections for %v", d.Round(time.Millisecond))
	c.sink.down()
	c.later(d, "sink-up", func() {
		if err := c.sink.up(); err != nil {
			c.t.Errorf("the sink cannot listen again: %v", err)
		}
		c.ev.add("sink-up", "accepting again")
	})
}

// sinkStall makes the destination take messages without answering for
// 0.5 to 8 s.
func (c *chaos) sinkStall() {
	d := c.dur(0.5, 8)
	c.ev.add("sink-stall", "taking messages, no ACK, for %v", d.Round(time.Millisecond))
	c.sink.setStalled(true)
	c.later(d, "sink-unstall", func() {
		c.sink.setStalled(false)
		c.ev.add("sink-unstall", "answering again")
	})
}

// refuseLane makes the destination refuse one lane's messages for 1 to 10
// s: AR (the lane blocks at once) or AE (it blocks after 5 attempts).
func (c *chaos) refuseLane() {
	l := c.rng.IntN(partnerLanes)
	code := hl7.AR
	if c.rng.IntN(2) == 0 {
		code = hl7.AE
	}
	d := c.dur(1, 10)
	c.ev.add("lane-refused", "lane %s answered %s for %v", laneName(l), code, d.Round(time.Millisecond))
	c.sink.setRefuse(laneName(l), code)
	c.later(d, "lane-accepted", func() {
		c.sink.setRefuse(laneName(l), "")
		c.ev.add("lane-accepted", "lane %s", laneName(l))
	})
}

// watchExits notices a node that exited: one the run killed or stopped is
// relaunched (a SIGTERM'd one after its exit, which must come within 60 s
// and be 0); one that exited on its own is a failure, relaunched as a
// service manager would.
func (c *chaos) watchExits() {
	for i, s := range c.state {
		e := c.fc.nodes[i]
		select {
		case <-e.exited:
		default:
			if !s.termAt.IsZero() && time.Since(s.termAt) > 60*time.Second {
				c.fail("node-%d did not exit within 60 s of SIGTERM", i)
				c.ev.add("kill-9", "node-%d: no exit 60 s after SIGTERM", i)
				e.kill()
				s.termAt = time.Time{}
				c.later(0, "relaunch", func() { c.relaunch(i) })
			}
			continue
		}
		if s.watched == e.exited {
			continue
		}
		s.watched = e.exited
		code := e.cmd.ProcessState.ExitCode()
		switch {
		case !s.termAt.IsZero():
			c.ev.add("exit", "node-%d exited %d, %v after SIGTERM", i, code, time.Since(s.termAt).Round(time.Millisecond))
			switch {
			case code == 0:
			case endedBySIGTERMBeforeItsHandler(e):
				// A fault soon after a relaunch: the process was still
				// in the Go runtime's start, before mf run's first
				// statement installs its handler, and took the
				// default action. It had accepted nothing.
				c.ev.add("exit", "node-%d was ended by the SIGTERM before it ran (it had logged nothing)", i)
			default:
				c.fail("node-%d exited %d after SIGTERM; want 0; its log: %s", i, code, lastLines(e.logs.String(), 15))
			}
			s.termAt = time.Time{}
			c.later(c.dur(0.5, 5), "relaunch", func() { c.relaunch(i) })
		case s.expect:
			// killed: the relaunch is scheduled
		default:
			c.ev.add("exit", "node-%d exited %d on its own", i, code)
			c.fail("node-%d exited %d on its own; its log: %s", i, code, lastLines(e.logs.String(), 15))
			s.dead, s.frozen = true, false
			c.setRunning(i, false)
			c.later(c.dur(0.5, 2), "relaunch", func() { c.relaunch(i) })
		}
	}
}

// awaitExit waits, at the end, for a SIGTERM'd node's exit.
func (c *chaos) awaitExit(i int) {
	select {
	case <-c.fc.nodes[i].exited:
	case <-time.After(time.Until(c.state[i].termAt.Add(60 * time.Second))):
	}
	c.watchExits()
}

func lastLines(s string, n int) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" && !strings.Contains(l, `"level":"debug"`) {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}

func (c *chaos) fail(format string, args ...any) {
	c.mu.Lock()
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

// watchLease records each election (a new term) and its owner.
func (c *chaos) watchLease(stop <-chan struct{}) {
	var term int64
	for !isClosed(stop) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := c.fc.admin.LeaseRead(ctx)
		cancel()
		if err == nil && l.Term != term {
			if term != 0 {
				c.ev.add("election", "term %d: %s", l.Term, l.Owner)
			}
			term = l.Term
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// apiLane is a lane as GET /lanes shows it.
type apiLane struct {
	Lane     string `json:"lane"`
	Depth    int64  `json:"depth"`
	HeadID   int64  `json:"head_id"`
	Blocked  bool   `json:"blocked"`
	Attempts int64  `json:"attempts"`
}

// operatorDo sends an API request with the operator token to node i.
func (c *chaos) operatorDo(i int, method, path string) (int, []byte, error) {
	req, _ := http.NewRequest(method, c.fc.nodes[i].api+path, nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	cl := http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, []byte(b.String()), err
}

// lanes reads GET /lanes from a node the operator may ask.
func (c *chaos) lanes() (int, []apiLane, error) {
	c.mu.Lock()
	var nodes []int
	for i, r := range c.running {
		if r {
			nodes = append(nodes, i)
		}
	}
	c.mu.Unlock()
	if len(nodes) == 0 {
		return -1, nil, fmt.Errorf("no node to ask")
	}
	i := nodes[rand.IntN(len(nodes))]
	code, b, err := c.operatorDo(i, "GET", "/lanes")
	if err != nil || code != http.StatusOK {
		return i, nil, fmt.Errorf("GET /lanes on node-%d: %d %v %s", i, code, err, b)
	}
	var out struct {
		Lanes []apiLane `json:"lanes"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return i, nil, err
	}
	return i, out.Lanes, nil
}

// operate is the operator: every 0.5 to 1.5 s it reads the lanes and, for
// a blocked one, retries its head (two times in three) or skips it. A skip
// is recorded (its control ID, read from the database) so that the verdict
// knows the row was set aside on purpose. Its own random source: the
// fault schedule stays the seed's whatever the operator meets.
func (c *chaos) operate(stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for !isClosed(stop) {
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
		i, lanes, err := c.lanes()
		if err != nil {
			continue
		}
		for _, l := range lanes {
			if !l.Blocked || l.HeadID == 0 {
				continue
			}
			action := "retry"
			if rng.IntN(3) == 0 && !c.draining() {
				action = "skip"
			}
			code, b, err := c.operatorDo(i, "POST", fmt.Sprintf("/queue/%d/%s", l.HeadID, action))
			if err != nil {
				c.ev.add("operator", "%s of row %d (lane %s) on node-%d: %v", action, l.HeadID, l.Lane, i, err)
				continue
			}
			what := ""
			if action == "skip" && code == http.StatusOK {
				id, err := c.controlIDOf(l.HeadID)
				if err != nil {
					c.fail("skip of row %d: cannot read its control id: %v", l.HeadID, err)
				}
				c.mu.Lock()
				c.skipped[id] = true
				c.mu.Unlock()
				what = " (" + id + ")"
			}
			c.ev.add("operator", "%s of row %d%s (lane %s, %d attempts) on node-%d: %d %s", action, l.HeadID, what, l.Lane, l.Attempts, i, code, strings.TrimSpace(string(b)))
		}
	}
}

// draining is set once faults are over: the operator then only retries.
func (c *chaos) draining() bool {
	c.ev.mu.Lock()
	defer c.ev.mu.Unlock()
	return c.ev.counts["end"] > 0
}

// controlIDOf reads the control id of a queue row's message, trying for a
// minute: the PostgreSQL server may be restarting (a fault of the run).
func (c *chaos) controlIDOf(queueID int64) (id string, err error) {
	pollUntil(time.Minute, 500*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, c.fc.url); err != nil {
			return false
		}
		defer conn.Close(ctx)
		err = conn.QueryRow(ctx, `SELECT m.control_id FROM mf_queue q JOIN mf_messages m ON m.id = q.message_id WHERE q.id = $1`, queueID).Scan(&id)
		return err == nil
	})
	return id, err
}

func (c *chaos) lanesText() string {
	_, lanes, err := c.lanes()
	if err != nil {
		return err.Error()
	}
	b, _ := json.Marshal(lanes)
	return string(b)
}
