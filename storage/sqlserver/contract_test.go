package sqlserver

// Offline checks of the contract between the Go code and the SQL files, for a
// dialect whose statements cannot run where there is no SQL Server: every
// parameter a statement uses is passed by the Go code and every one passed is
// used, the table-valued parameter rows match their table types, migrations
// split into batches, and durations split into DATEADD's INT arguments; and
// the single node's lock and its watch, on what the fake driver answers.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage"
)

// errStop ends a Store method at the first statement the fake has no result
// for, once its arguments are recorded.
var errStop = errors.New("fake driver: stop here")

// fakeResults are the rows the fake returns for the statements after which a
// method goes on to another statement worth checking.
var fakeResults = map[string][][]driver.Value{
	"fence":               {{int64(1)}},
	"migrate_lock":        {{int64(0)}},
	"migrate_applied":     {},
	"message_purge_queue": {{int64(0), int64(0)}},
	"message_purge_walk":  {{int64(0), int64(0)}},
	"node_purge":          {{int64(0)}},
	"queue_complete":      {{int64(0)}},
	"queue_give_back":     {{int64(0)}},
	"queue_retry":         {{int64(0)}},
	"queue_dead":          {{int64(0)}},
	"queue_extend_lease":  {{int64(0)}},
	"queue_release":       {{int64(0), nil, nil}}, // updated, message_id, destination
	"queue_skip":          {{int64(0), nil, nil}},
	"message_read":        {{int64(1), "in", time.Unix(0, 0), "ctl", "ADT^A01", []byte("MSH|"), storage.MessageRouted, ""}},
	"queue_by_message":    {}, // MessageRead reads the rows first, then the message
	// One dead row, so that QueueResendDead goes on to resend it.
	"queue_resend_dead_pick": {{int64(7), int64(1), "lab", "in", []byte("MSH|")}},
	// The single node's lock held by another session, so that
	// HoldSingleNode goes on to name it.
	"single_node_lock":   {{int64(-1), int64(51), time.Unix(0, 0)}},
	"single_node_holder": {{int64(52), time.Unix(0, 0), "mf first", "host-a"}},
}

type call struct {
	name   string // the query's file name, or "" for a migration batch
	text   string
	args   []string
	values []any
	// inTx says the statement ran in a transaction the Go code opened.
	inTx bool
}

type fakeDriver struct {
	mu    sync.Mutex
	calls []call
	// results, when it has the statement, is used instead of fakeResults.
	results map[string][][]driver.Value
	// pingErr is what a ping of a connection returns.
	pingErr error
	// execErr, when set, is what an Exec of the statement name ("" for a
	// migration batch) returns.
	execErr func(name string) error
	// queryErr, when set, is what a Query of the statement name returns.
	queryErr func(name string) error
	// commits counts the transactions committed.
	commits int
}

// set makes the fake return rows for the statement name from now on.
func (d *fakeDriver) set(name string, rows ...[]driver.Value) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setLocked(name, rows...)
}

func (d *fakeDriver) setLocked(name string, rows ...[]driver.Value) {
	if d.results == nil {
		d.results = map[string][][]driver.Value{}
	}
	d.results[name] = rows
}

// result is the rows the fake returns for the statement name.
func (d *fakeDriver) result(name string) ([][]driver.Value, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rows, ok := d.results[name]; ok {
		return slices.Clone(rows), true
	}
	rows, ok := fakeResults[name]
	return rows, ok
}

// ran says how many times the statement name was run.
func (d *fakeDriver) ran(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ranLocked(name)
}

func (d *fakeDriver) ranLocked(name string) int {
	n := 0
	for _, c := range d.calls {
		if c.name == name {
			n++
		}
	}
	return n
}

func (d *fakeDriver) Open(string) (driver.Conn, error) { return &fakeConn{d: d}, nil }

func (d *fakeDriver) record(text string, args []driver.NamedValue, inTx bool) string {
	name := ""
	for n, q := range queries {
		if q == text {
			name = n
		}
	}
	c := call{name: name, text: text, inTx: inTx}
	for _, a := range args {
		c.args = append(c.args, a.Name)
		c.values = append(c.values, a.Value)
	}
	d.mu.Lock()
	d.calls = append(d.calls, c)
	d.mu.Unlock()
	return name
}

type fakeConn struct {
	d    *fakeDriver
	inTx bool // a transaction is open on it
}

func (c *fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("fake: no Prepare") }
func (c *fakeConn) Close() error                        { return nil }
func (c *fakeConn) Begin() (driver.Tx, error)           { c.inTx = true; return fakeTx{c: c}, nil }
func (c *fakeConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	c.inTx = true
	return fakeTx{c: c}, nil
}
func (c *fakeConn) CheckNamedValue(*driver.NamedValue) error { return nil } // TVPs and all

func (c *fakeConn) Ping(context.Context) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	return c.d.pingErr
}

func (c *fakeConn) ExecContext(_ context.Context, text string, args []driver.NamedValue) (driver.Result, error) {
	name := c.d.record(text, args, c.inTx)
	c.d.mu.Lock()
	fail := c.d.execErr
	c.d.mu.Unlock()
	if fail != nil {
		if err := fail(name); err != nil {
			return nil, err
		}
	}
	return driver.RowsAffected(0), nil
}

func (c *fakeConn) QueryContext(_ context.Context, text string, args []driver.NamedValue) (driver.Rows, error) {
	name := c.d.record(text, args, c.inTx)
	c.d.mu.Lock()
	fail := c.d.queryErr
	c.d.mu.Unlock()
	if fail != nil {
		if err := fail(name); err != nil {
			return nil, err
		}
	}
	rows, ok := c.d.result(name)
	if !ok {
		return nil, errStop
	}
	return &fakeRows{rows: rows}, nil
}

type fakeTx struct{ c *fakeConn }

func (t fakeTx) Commit() error {
	t.c.inTx = false
	t.c.d.mu.Lock()
	t.c.d.commits++
	t.c.d.mu.Unlock()
	return nil
}

func (t fakeTx) Rollback() error { t.c.inTx = false; return nil }

type fakeRows struct{ rows [][]driver.Value }

func (r *fakeRows) Columns() []string {
	if len(r.rows) == 0 {
		return []string{"c"}
	}
	return make([]string, len(r.rows[0]))
}
func (r *fakeRows) Close() error { return nil }
func (r *fakeRows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}

type fakeConnector struct{ d *fakeDriver }

func (c fakeConnector) Connect(context.Context) (driver.Conn, error) { return &fakeConn{d: c.d}, nil }
func (c fakeConnector) Driver() driver.Driver                        { return c.d }

var (
	lineComment = regexp.MustCompile(`--[^\n]*`)
	stringLit   = regexp.MustCompile(`N?'[^']*'`)
	paramRef    = regexp.MustCompile(`(^|[^@\w])@(\w+)`)
	// A declared variable is followed by its type (or TABLE) inside a
	// DECLARE statement: "DECLARE @a INT, @b TABLE (...)".
	declared = regexp.MustCompile(`@(\w+)\s+[A-Za-z]`)
	// sp_getapplock's own argument names.
	procArgs = map[string]bool{"Resource": true, "LockMode": true, "LockOwner": true, "LockTimeout": true}
)

// freeParams lists the @names a batch uses but does not declare: the
// parameters the Go code must pass.
func freeParams(text string) []string {
	text = stringLit.ReplaceAllString(lineComment.ReplaceAllString(text, ""), "''")
	local := map[string]bool{}
	for _, stmt := range strings.Split(text, ";") {
		if i := strings.Index(strings.ToUpper(stmt), "DECLARE "); i >= 0 {
			for _, m := range declared.FindAllStringSubmatch(stmt[i:], -1) {
				local[m[1]] = true
			}
		}
	}
	var out []string
	for _, m := range paramRef.FindAllStringSubmatch(text, -1) {
		if name := m[2]; !local[name] && !procArgs[name] && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func TestStatementsGetTheirParameters(t *testing.T) {
	d := &fakeDriver{}
	db := sql.OpenDB(fakeConnector{d: d})
	defer db.Close()
	s := &Store{db: db, lease: db} // one fake database: the lease's statements are checked alike
	s.single.db = db
	ctx := context.Background()
	f := storage.Fence{Owner: "node-a", Term: 3}
	c := storage.Claim{ID: 7, Owner: "node-a", Attempt: 1}
	two := storage.NewMessage{Inbound: "in", Payload: []byte("MSH|"), Status: storage.MessageRouted,
		Deliveries: []storage.Delivery{{Destination: "lab", Lane: "lab/1"}, {Destination: "ris", Lane: "ris/1"}}}

	// Every method, so that every statement is reached at least once.
	_ = s.Ping(ctx)
	_, _ = s.DelayedDurability(ctx)
	_ = s.Migrate(ctx)
	d.set("migrate_applied", []driver.Value{int64(1)}) // a schema in use: the lock timeout too
	_ = s.Migrate(ctx)
	_ = s.SchemaCheck(ctx)
	_, _, _ = s.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "node-a", TTL: time.Minute})
	_, _ = s.LeaseAttemptRenew(ctx, storage.LeaseAttemptRenewParams{Owner: "node-a", Term: 3, TTL: time.Minute})
	_, _ = s.LeaseResign(ctx, storage.LeaseResignParams{Owner: "node-a", Term: 3})
	_, _ = s.LeaseRead(ctx)
	_ = s.NodeHeartbeat(ctx, storage.NodeHeartbeatParams{NodeID: "a", Host: "h", PID: 1})
	_ = s.NodeLeave(ctx, storage.NodeLeaveParams{NodeID: "a"})
	_, _ = s.NodeList(ctx)
	_, _ = s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{two, two}})
	_, _ = s.MessageRead(ctx, 1)
	_, _ = s.MessageSearch(ctx, storage.MessageSearchParams{Since: time.Now().Add(-time.Hour), ControlID: "ABC123", Limit: 51})
	_, _ = s.MessageResend(ctx, storage.MessageResendParams{MessageID: 1, Deliveries: two.Deliveries})
	_, _ = s.QueueResendDead(ctx, storage.QueueResendDeadParams{Destination: "lab", Since: time.Now().Add(-time.Hour), Until: time.Now(), Limit: 10,
		Lane: func(storage.DeadRow) (string, storage.ResendSkip) { return "lab/1", storage.ResendQueued }})
	_, _ = s.MessagePurge(ctx, storage.MessagePurgeParams{Fence: f, OlderThan: time.Hour})
	_, _ = s.QueueClaimNext(ctx, storage.QueueClaimNextParams{Fence: f, Lane: "lab/1", Owner: "node-a", LeaseTTL: time.Minute})
	_ = s.QueueComplete(ctx, storage.QueueCompleteParams{Fence: f, Claim: c})
	_, _ = s.QueueGiveBack(ctx, storage.QueueGiveBackParams{Fence: f, Claims: []storage.Claim{c}})
	_, _ = s.QueueReleaseOwn(ctx, storage.QueueReleaseOwnParams{Fence: f, Lane: "lab/1", Owner: "node-a"})
	_ = s.QueueRetry(ctx, storage.QueueRetryParams{Fence: f, Claim: c, Delay: time.Second, Error: "x"})
	_ = s.QueueDead(ctx, storage.QueueDeadParams{Fence: f, Claim: c, Error: "x"})
	_ = s.QueueExtendLease(ctx, storage.QueueExtendLeaseParams{Fence: f, Claim: c, TTL: time.Minute})
	_ = s.QueueHold(ctx, storage.QueueHoldParams{Fence: f, Claim: c, Error: "x"})
	_, _ = s.QueueRelease(ctx, storage.QueueReleaseParams{ID: 7})
	_, _ = s.QueueSkip(ctx, storage.QueueSkipParams{ID: 7, Reason: "x"})
	_, _ = s.QueueRecoverForeign(ctx, storage.QueueRecoverForeignParams{Fence: f, Owner: "node-a"})
	_, _ = s.QueueReclaimExpired(ctx, storage.QueueReclaimExpiredParams{Fence: f})
	_, _ = s.QueueLanes(ctx, storage.QueueLanesParams{After: "lab/1", Limit: 1000})
	_, _ = s.QueueStats(ctx)
	_, _ = s.ConfigVersionBump(ctx, storage.ConfigVersionBumpParams{})
	_, _ = s.ConfigVersionRead(ctx, storage.ConfigVersionReadParams{})
	_, _ = s.Secret(ctx, "lane_hash", []byte("fresh"))
	_, _ = s.QueueLaneKeys(ctx)
	_, _ = s.OutboundHold(ctx, storage.OutboundHoldParams{Outbound: "lab"})
	_, _ = s.OutboundRelease(ctx, storage.OutboundReleaseParams{Outbound: "lab"})
	_, _ = s.OutboundHolds(ctx)
	_ = s.QueueLaneKeyRecord(ctx, storage.QueueLaneKeyRecordParams{Fence: f, Destination: "lab", LaneKey: "in=PID-3.1"})
	_, _ = s.QueueRelaneRead(ctx, storage.QueueRelaneReadParams{Destination: "lab", AfterLane: "lab/1", AfterID: 7, Limit: 500})
	_, _ = s.QueueRelane(ctx, storage.QueueRelaneParams{Fence: f, Moves: []storage.LaneMove{{ID: 7, Lane: "lab/2"}}})
	defer func(d time.Duration) { singleNodeStartWait = d }(singleNodeStartWait)
	singleNodeStartWait = 0 // the fake's lock is held: no wait for it
	_, _ = s.HoldSingleNode(ctx)

	reached := map[string]bool{}
	batches := 0
	for _, c := range d.calls {
		if c.name == "" {
			batches++
			continue
		}
		reached[c.name] = true
		got := slices.Clone(c.args)
		slices.Sort(got)
		if want := freeParams(c.text); !slices.Equal(got, want) {
			t.Errorf("%s.sql: Go passes %v, the statement uses %v", c.name, got, want)
		}
		// Times come from the database clock only. go-mssqldb sends a
		// time.Time as DATETIMEOFFSET, which compared with a DATETIME2
		// column converts by the session's offset rules, not as UTC.
		for i, v := range c.values {
			if _, ok := v.(time.Time); ok {
				t.Errorf("%s.sql: Go passes @%s as a time.Time; times are the database's (SYSUTCDATETIME)", c.name, c.args[i])
			}
		}
	}
	for name := range queries {
		if !reached[name] {
			t.Errorf("%s.sql was never run by any method", name)
		}
	}
	if batches == 0 {
		t.Error("Migrate ran no migration batch")
	}
}

func TestFreeParams(t *testing.T) {
	got := freeParams("-- @comment\nDECLARE @now DATETIME2(6) = DATEADD(second, -@older_s, x), @t TABLE (id INT);\n" +
		"EXEC @r = sp_getapplock @Resource = N'@x'; SELECT @@ROWCOUNT, @now, @lane FROM @t WHERE a = @owner;")
	if want := []string{"lane", "older_s", "owner", "r"}; !slices.Equal(got, want) {
		t.Fatalf("freeParams = %v, want %v", got, want)
	}
}

// The driver maps a TVP row's fields to the table type's columns by position.
func TestIngestRowsMatchTableTypes(t *testing.T) {
	ms, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	var all string
	for _, m := range ms {
		all += m.SQL
	}
	for typeName, row := range map[string]any{ingestMessageType: ingestMessageRow{}, ingestDeliveryType: ingestDeliveryRow{}, resendDeadType: resendDeadRow{}} {
		cols := tableTypeColumns(t, all, typeName)
		rt := reflect.TypeOf(row)
		var fields []string
		for i := range rt.NumField() {
			fields = append(fields, snake(rt.Field(i).Name))
		}
		if !slices.Equal(cols, fields) {
			t.Errorf("%s columns %v, Go row fields %v", typeName, cols, fields)
		}
	}
}

func tableTypeColumns(t *testing.T, script, typeName string) []string {
	t.Helper()
	start := strings.Index(script, "CREATE TYPE "+typeName+" AS TABLE (")
	if start < 0 {
		t.Fatalf("no CREATE TYPE %s", typeName)
	}
	body := script[start:]
	body = body[strings.Index(body, "(")+1 : strings.Index(body, ");")]
	var cols []string
	for _, line := range strings.Split(body, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] == "PRIMARY" {
			continue
		}
		cols = append(cols, fields[0])
	}
	return cols
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' && s[i-1] >= 'a' && s[i-1] <= 'z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToLower(b.String())
}

func TestBatches(t *testing.T) {
	got := batches("SET X ON;\nGO\r\nCREATE TABLE a (GO INT);\n  GO\nGO  \nSELECT 1;\nGO\n\n")
	want := []string{"SET X ON;\n", "CREATE TABLE a (GO INT);\n  GO\n", "SELECT 1;\n"}
	if !slices.Equal(got, want) {
		t.Fatalf("batches = %q, want %q", got, want)
	}
	ms, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for i, b := range batches(m.SQL) {
			if strings.Contains("\n"+b, "\nGO\n") {
				t.Errorf("%s batch %d still holds a GO line", m.Name, i+1)
			}
		}
	}
}

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		d         time.Duration
		s, micros int32
	}{
		{0, 0, 0},
		{700 * time.Millisecond, 0, 700000},
		{1500 * time.Millisecond, 1, 500000},
		{time.Minute, 60, 0},
		{-time.Hour, -3600, 0},
		{-1500 * time.Millisecond, -1, -500000},
		{30 * 24 * time.Hour, 30 * 24 * 3600, 0}, // beyond a millisecond INT
		{200 * 365 * 24 * time.Hour, 1<<31 - 1, 0},
		// The longest times config takes for this store pass unclamped,
		// to the microsecond.
		{config.MaxSQLServerSeconds * time.Second, config.MaxSQLServerSeconds, 0},
		{(config.MaxSQLServerSeconds-1)*time.Second + 999999*time.Microsecond, config.MaxSQLServerSeconds - 1, 999999},
	} {
		args := span("x", tc.d)
		s := args[0].(sql.NamedArg)
		us := args[1].(sql.NamedArg)
		if s.Name != "x_s" || us.Name != "x_us" || s.Value != tc.s || us.Value != tc.micros {
			t.Errorf("span(%v) = %v=%v %v=%v, want %d s %d us", tc.d, s.Name, s.Value, us.Name, us.Value, tc.s, tc.micros)
		}
	}
}

// The T-SQL keeps what the fence, the lane claim's FIFO argument and the
// database clock rest on (fence.sql, queue_claim_next.sql,
// message_ingest.sql), read from the embedded files, since no SQL Server
// runs these statements here: each rule below names what breaks without it.
func TestStatementsKeepTheFenceTheLaneOrderAndTheDatabaseClock(t *testing.T) {
	code := func(text string) string { return lineComment.ReplaceAllString(text, "") }
	ms, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for name, text := range queries {
		files["sql/"+name+".sql"] = code(text)
	}
	for _, m := range ms {
		files["migrations/"+m.Name+".sql"] = code(m.SQL)
	}

	// The fence holds the term row shared until commit, whatever
	// READ_COMMITTED_SNAPSHOT says, so an election cannot commit between
	// the check and the writes of the old term; and it holds that row, not
	// the lease row, which the renewal updates: a fenced write that waited
	// on anything would hold the renewal behind it, and the leader would
	// fence itself (migration 0012).
	fence := files["sql/fence.sql"]
	if !regexp.MustCompile(`(?is)FROM\s+mf_leader_term\s+WITH\s*\([^)]*\bHOLDLOCK\b`).MatchString(fence) {
		t.Error("fence.sql: mf_leader_term is not read WITH (HOLDLOCK): the shared lock would end with the read, and an election could commit before the fenced writes")
	}
	if strings.Contains(fence, "mf_leader_lease") {
		t.Error("fence.sql reads mf_leader_lease: its shared lock, held to commit, makes the renewal (an UPDATE of that row) wait for every fenced write")
	}
	// Only an election writes the term row, through the lease's trigger,
	// and only when owner or term changed: a renewal, a resignation or an
	// election attempt that elects nobody must not lock it, or it would
	// wait for the fenced writes again.
	writesTerm := regexp.MustCompile(`(?is)\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM|MERGE)\s+mf_leader_term\b|\bFROM\s+mf_leader_term\s+AS\s+\w+\s+JOIN\b`)
	for name, text := range files {
		if strings.HasPrefix(name, "sql/") && writesTerm.MatchString(text) {
			t.Errorf("%s writes mf_leader_term: only the trigger on mf_leader_lease may, when an election changes owner or term", name)
		}
	}
	trigger := regexp.MustCompile(`(?is)CREATE\s+TRIGGER\s+\w+\s+ON\s+mf_leader_lease\s+AFTER\s+UPDATE\b(.*)`).FindStringSubmatch(files["migrations/0012_fence_spares_the_renewal.sql"])
	if trigger == nil {
		t.Error("migrations/0012_fence_spares_the_renewal.sql: no AFTER UPDATE trigger on mf_leader_lease: an election would not move the term row, and the fence would pass the old term")
	} else {
		body := trigger[1]
		guard := regexp.MustCompile(`(?is)\bIF\s+EXISTS\s*\(.*\binserted\b.*\bdeleted\b.*\bterm\s*<>\s*\w+\.term\b.*\bowner\s*<>\s*\w+\.owner\b`).FindStringIndex(body)
		update := regexp.MustCompile(`(?is)\bUPDATE\b[^;]*\bmf_leader_term\b`).FindStringIndex(body)
		if update == nil || guard == nil || guard[0] > update[0] {
			t.Error("migrations/0012: the trigger does not update mf_leader_term only IF EXISTS a row of inserted whose term or owner differs from deleted's: every renewal would lock the term row and wait for the fenced writes")
		}
	}

	skipping := regexp.MustCompile(`(?i)\b(READPAST|NOLOCK|READUNCOMMITTED|NOWAIT)\b`)
	clock := regexp.MustCompile(`(?i)\b(GETDATE|GETUTCDATE|SYSDATETIME|SYSDATETIMEOFFSET|CURRENT_TIMESTAMP)\b`)
	datetime2 := regexp.MustCompile(`(?i)\bDATETIME2\b(\s*\(\s*\d+\s*\))?`)
	for name, text := range files {
		// A read that skips a locked row, or reads an uncommitted one,
		// would pass over a lane's head, or see a queue id before the
		// ids below it are committed.
		if m := skipping.FindString(text); m != "" {
			t.Errorf("%s: %s reads past locks", name, m)
		}
		// Leases and due times are UTC on the database clock; GETDATE
		// and SYSDATETIME are the server's local time.
		if m := clock.FindString(text); m != "" {
			t.Errorf("%s: %s is not the UTC database clock (SYSUTCDATETIME)", name, m)
		}
		for _, m := range datetime2.FindAllString(text, -1) {
			if strings.ReplaceAll(strings.ToUpper(m), " ", "") != "DATETIME2(6)" {
				t.Errorf("%s: %s; every time is DATETIME2(6), so that times compare at one precision", name, m)
			}
		}
		// A bare OUTPUT returns its rows in no guaranteed order (and is
		// refused on a table with a trigger): ids go INTO a table and are
		// read back with ORDER BY.
		for _, m := range regexp.MustCompile(`(?is)\bOUTPUT\b[^;]*`).FindAllString(text, -1) {
			if !regexp.MustCompile(`(?i)\bINTO\b`).MatchString(m) {
				t.Errorf("%s: OUTPUT without INTO: %q", name, m)
			}
		}
	}

	// Ingest: ids are given under the ingest lock, held to commit, and in
	// batch order; nothing reads them back in OUTPUT's order.
	ingest := files["sql/message_ingest.sql"]
	// The statement's own ORDER BY: the last one, with no parenthesis
	// after it (not a window's OVER (ORDER BY ...)).
	ordered := regexp.MustCompile(`(?i)\bORDER\s+BY\b[^()]*$`)
	// An operator's resend draws queue ids too: under the same lock. A
	// resend-dead locks its dead rows in the first batch of its
	// transaction (queue_resend_dead_pick.sql) and takes the lock in the
	// second, which inserts: the lock is held to commit (LockOwner
	// Transaction), and not while the rows' locks are waited for
	// (TestResendsTakeTheIngestLockAfterTheirRowLocks).
	for _, name := range []string{"message_ingest", "message_resend", "queue_resend_dead"} {
		text := files["sql/"+name+".sql"]
		lock := regexp.MustCompile(`(?is)sp_getapplock[^;]*@Resource\s*=\s*@ingest\b[^;]*@LockMode\s*=\s*N'Exclusive'[^;]*@LockOwner\s*=\s*N?'Transaction'`).FindStringIndex(text)
		insert := regexp.MustCompile(`(?i)\bINSERT\s+INTO\s+mf_`).FindStringIndex(text)
		if lock == nil || insert == nil || lock[0] > insert[0] {
			t.Errorf("%s.sql: the ingest lock (sp_getapplock mf_ingest, LockOwner Transaction) is not taken before the first id is drawn: a later queue id could commit before an earlier one", name)
		}
	}
	for _, name := range []string{"message_resend", "queue_resend_dead"} {
		if stmt := regexp.MustCompile(`(?is)\bINSERT\s+INTO\s+mf_queue\b[^;]*`).FindString(files["sql/"+name+".sql"]); !ordered.MatchString(stmt) {
			t.Errorf("%s.sql: INSERT INTO mf_queue ... SELECT has no ORDER BY: the ids would not follow the rows' order", name)
		}
	}
	for _, table := range []string{"mf_messages", "mf_queue"} {
		stmt := regexp.MustCompile(`(?is)\bINSERT\s+INTO\s+` + table + `\b[^;]*`).FindString(ingest)
		if !ordered.MatchString(stmt) {
			t.Errorf("message_ingest.sql: INSERT INTO %s ... SELECT has no ORDER BY: IDENTITY values follow the ORDER BY of an INSERT ... SELECT, and only then are they in batch order", table)
		}
	}
	selects := regexp.MustCompile(`(?is)\bSELECT\b[^;]*`).FindAllString(ingest, -1)
	if last := selects[len(selects)-1]; !ordered.MatchString(last) {
		t.Errorf("message_ingest.sql: the ids are returned without ORDER BY: %q", last)
	}

	// Lane claim: the row found as a candidate is read again by id under an
	// update lock held to commit before its status decides anything, so
	// two claimers of a lane serialise on its head.
	claim := files["sql/queue_claim_next.sql"]
	byID := regexp.MustCompile(`(?is)\bFROM\s+mf_queue\b(\s+WITH\s*\(([^)]*)\))?\s+WHERE\s+id\s*=`).FindAllStringSubmatch(claim, -1)
	if len(byID) == 0 {
		t.Error("queue_claim_next.sql: no read of mf_queue by id: the head is not locked before its status is read")
	}
	for _, m := range byID {
		hints := strings.ToUpper(m[2])
		if !strings.Contains(hints, "UPDLOCK") || !strings.Contains(hints, "HOLDLOCK") {
			t.Errorf("queue_claim_next.sql: %q does not lock the row (UPDLOCK, HOLDLOCK) until commit", strings.Join(strings.Fields(m[0]), " "))
		}
	}

	// A lease runs from a clock read once its rows are locked: a clock
	// read before a wait for a row's lock made the lease shorter by the
	// wait, and the sweep re-pended a row being sent (a duplicate).
	updlock := regexp.MustCompile(`(?i)\bWITH\s*\([^)]*\bUPDLOCK\b`)
	clockRead := regexp.MustCompile(`(?i)\bSYSUTCDATETIME\s*\(\s*\)`)
	lastLock := func(text string) int {
		locks := updlock.FindAllStringIndex(text, -1)
		if len(locks) == 0 {
			return -1
		}
		return locks[len(locks)-1][0]
	}
	leases := regexp.MustCompile(`(?i)\blease_expires_at\s*=\s*DATEADD\b`).FindAllStringIndex(claim, -1)
	if len(leases) == 0 {
		t.Error("queue_claim_next.sql: no lease set (lease_expires_at = DATEADD(...))")
	}
	if last := lastLock(claim); last >= 0 {
		for _, l := range leases {
			if l[0] < last || clockRead.FindStringIndex(claim[last:l[0]]) == nil {
				t.Error("queue_claim_next.sql: a lease is not counted from a clock read after the last row lock (UPDLOCK): the waits for the rows behind the head shorten it")
			}
		}
	}
	for _, name := range []string{"queue_extend_lease", "queue_retry"} {
		text := files["sql/"+name+".sql"]
		lock, clock := updlock.FindStringIndex(text), clockRead.FindStringIndex(text)
		if lock == nil || clock == nil || clock[0] < lock[0] {
			t.Errorf("%s.sql: the clock is not read after the row is locked (UPDLOCK): a wait for the row's lock would shorten the time it sets", name)
		}
	}
}

// Names compare exactly in SQL Server as on PostgreSQL and SQLite, checked
// offline since no SQL Server runs the conformance suite here: every name
// column of the schema has a binary collation (a server's default one
// usually ignores case: lanes "lab/P1" and "lab/p1" would be one), and every
// statement that groups rows by a name, or matches a lane, a destination or
// an outbound to a parameter, also compares DATALENGTH, since T-SQL compares strings padded with spaces, whatever the
// collation ("lab" and "lab " would be one destination, "x/1" and "x/1 "
// one lane).
func TestNamesCompareExactly(t *testing.T) {
	code := func(text string) string { return lineComment.ReplaceAllString(text, "") }
	ms, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	// Bounded NVARCHAR columns are the names (free text is NVARCHAR(MAX));
	// the table types' columns are all MAX and only carry values in.
	column := regexp.MustCompile(`(?im)^\s*(?:ALTER\s+TABLE\s+\w+\s+ADD\s+)?(\w+)\s+NVARCHAR\s*\(\s*\d+\s*\)([^,\n]*)`)
	columns := 0
	for _, m := range ms {
		for _, c := range column.FindAllStringSubmatch(code(m.SQL), -1) {
			columns++
			if !regexp.MustCompile(`(?i)\bCOLLATE\s+\w+_BIN2\b`).MatchString(c[2]) {
				t.Errorf("migrations/%s.sql: column %s is NVARCHAR without a binary collation (COLLATE Latin1_General_100_BIN2): it compares as the database's collation, often ignoring case", m.Name, c[1])
			}
		}
	}
	if columns < 10 {
		t.Fatalf("found %d bounded NVARCHAR columns in the migrations, want every name column", columns)
	}

	names := []string{"lane", "destination", "node_id", "owner", "lease_owner", "name"}
	groupBy := regexp.MustCompile(`(?is)\bGROUP\s+BY\b(.*?)(?:\bORDER\s+BY\b|\bHAVING\b|$)`)
	laneMatch := regexp.MustCompile(`(?i)\blane\s*=\s*@lane\b`)
	// A destination or an outbound matched to a parameter, qualified or not.
	nameMatch := regexp.MustCompile(`(?i)(?:^|[^\w.])(\w+\.)?(destination|outbound)\s*=\s*@(\w+)\b`)
	for name, text := range queries {
		for _, stmt := range strings.Split(code(text), ";") {
			for _, g := range groupBy.FindAllStringSubmatch(stmt, -1) {
				list := groupList(g[1])
				for _, n := range names {
					if regexp.MustCompile(`(?i)(^|[\s,.])`+n+`\s*(,|$)`).MatchString(list) &&
						!regexp.MustCompile(`(?i)DATALENGTH\s*\(\s*(\w+\.)?`+n+`\s*\)`).MatchString(list) {
						t.Errorf("%s.sql: GROUP BY %s: groups by %s without DATALENGTH(%s): names that differ only in trailing spaces are one group", name, list, n, n)
					}
				}
			}
			if laneMatch.MatchString(stmt) && !regexp.MustCompile(`(?i)DATALENGTH\s*\(\s*lane\s*\)\s*=\s*DATALENGTH\s*\(\s*@lane\s*\)`).MatchString(stmt) {
				t.Errorf("%s.sql: matches lane = @lane without DATALENGTH(lane) = DATALENGTH(@lane): lanes that differ only in trailing spaces are one", name)
			}
			for _, m := range nameMatch.FindAllStringSubmatch(stmt, -1) {
				col, param := m[2], m[3]
				guard := `(?i)DATALENGTH\s*\(\s*(\w+\.)?` + col + `\s*\)\s*=\s*DATALENGTH\s*\(\s*@` + param + `\s*\)`
				if !regexp.MustCompile(guard).MatchString(stmt) {
					t.Errorf("%s.sql: matches %s = @%s without DATALENGTH(%s) = DATALENGTH(@%s): names that differ only in trailing spaces are one", name, m[1]+col, param, col, param)
				}
			}
		}
	}
}

// groupList is the grouping list at the start of text (what follows GROUP
// BY): up to the parenthesis that closes a subquery around it, if any.
func groupList(text string) string {
	depth := 0
	for i, r := range text {
		switch r {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				text = text[:i]
				return strings.Join(strings.Fields(text), " ")
			}
			depth--
		}
	}
	return strings.Join(strings.Fields(text), " ")
}

// A second single node on a schema is refused, naming the session that holds
// the lock (single_node_holder.sql), when sp_getapplock says -1; the first
// takes it (0). Both led before, each with the zero fence every process
// passes.
func TestASecondSingleNodeOnASchemaIsRefused(t *testing.T) {
	defer func(d time.Duration) { singleNodeStartWait = d }(singleNodeStartWait)
	singleNodeStartWait = 0
	ctx := context.Background()
	store := func() (*Store, *fakeDriver) {
		d := &fakeDriver{}
		db := sql.OpenDB(fakeConnector{d: d})
		t.Cleanup(func() { db.Close() })
		s := &Store{db: db, lease: db}
		s.single.db = db
		t.Cleanup(s.single.Close)
		return s, d
	}

	s, d := store()
	d.set("single_node_lock", []driver.Value{int64(0), int64(51), time.Unix(0, 0)})
	if _, err := s.HoldSingleNode(ctx); err != nil {
		t.Fatalf("a single node whose lock is free: %v", err)
	}

	s, _ = store() // the fake's default: -1, and mf first holds it
	_, err := s.HoldSingleNode(ctx)
	if !errors.Is(err, storage.ErrSingleNodeTaken) || !strings.Contains(err.Error(), `session 52, program_name "mf first", host_name "host-a"`) || !strings.Contains(err.Error(), "enable [cluster]") {
		t.Fatalf("a second single node: %v; want ErrSingleNodeTaken naming mf first's session", err)
	}

	s, d = store()
	d.set("single_node_holder") // let go meanwhile
	if _, err := s.HoldSingleNode(ctx); !errors.Is(err, storage.ErrSingleNodeTaken) || !strings.Contains(err.Error(), "since ended") {
		t.Fatalf("a second single node, the holder gone when looked for: %v; want ErrSingleNodeTaken", err)
	}

	s, d = store()
	d.set("single_node_lock", []driver.Value{int64(-999), int64(51), time.Unix(0, 0)})
	if _, err := s.HoldSingleNode(ctx); err == nil || errors.Is(err, storage.ErrSingleNodeTaken) || !strings.Contains(err.Error(), "-999") {
		t.Fatalf("sp_getapplock failing (-999): %v; want its code, not ErrSingleNodeTaken", err)
	}
}

// An election takes the single node's lock (the same resource) shared, owned
// by a transaction the Go code opens and commits around it, without waiting,
// and elects nobody unless sp_getapplock granted it: -1 (a single node holds
// it) is storage.ErrSingleNodeRunning, any other negative code an error
// naming it. A clustered node was elected beside a running single node, and
// its promotion recovery gave back the rows the single node was still
// sending.
func TestAnElectionBesideASingleNodeElectsNobody(t *testing.T) {
	ctx := context.Background()
	d := &fakeDriver{}
	db := sql.OpenDB(fakeConnector{d: d})
	defer db.Close()
	s := &Store{db: db, lease: db}
	at := time.Unix(1000, 0)
	answer := func(owner string, term int64, elected bool, lock int64) {
		d.set("lease_attempt_elect", []driver.Value{owner, term, at, at.Add(time.Minute), at, elected, lock})
	}
	elect := func() (storage.Lease, bool, error) {
		return s.LeaseAttemptElect(ctx, storage.LeaseAttemptElectParams{Owner: "node-a", TTL: time.Minute})
	}

	answer("", 0, false, -1)
	if _, ok, err := elect(); ok || !errors.Is(err, storage.ErrSingleNodeRunning) || !strings.Contains(err.Error(), "enable [cluster]") {
		t.Fatalf("an election while a single node holds its lock (-1): elected=%v err=%v; want ErrSingleNodeRunning saying what to do", ok, err)
	}
	answer("", 0, false, -999)
	if _, ok, err := elect(); ok || err == nil || errors.Is(err, storage.ErrSingleNodeRunning) || !strings.Contains(err.Error(), "-999") {
		t.Fatalf("an election whose shared take failed (-999): elected=%v err=%v; want an error naming the code", ok, err)
	}
	answer("node-a", 1, true, 0)
	if l, ok, err := elect(); !ok || err != nil || l.Owner != "node-a" || l.Term != 1 {
		t.Fatalf("an election with the lock granted (0): %+v elected=%v err=%v; want node-a at term 1", l, ok, err)
	}
	answer("node-b", 1, false, 0)
	if l, ok, err := elect(); ok || err != nil || l.Owner != "node-b" {
		t.Fatalf("an election on a live lease, the lock granted: %+v elected=%v err=%v; want the lease, not elected", l, ok, err)
	}
	elections := 0
	for _, c := range d.calls {
		if c.name != "lease_attempt_elect" {
			continue
		}
		elections++
		if !c.inTx {
			t.Errorf("the election ran outside a transaction: sp_getapplock refuses a transaction-owned lock there (-999), and it would be let go before the election committed")
		}
	}
	if elections != 4 || d.commits != 4 {
		t.Errorf("%d elections, %d commits; want 4 each", elections, d.commits)
	}

	// The lock taken: the single node's resource, its mode and owner.
	args := regexp.MustCompile(`(?is)\bsp_getapplock\s+@Resource\s*=\s*(@\w+)\s*,\s*@LockMode\s*=\s*N'(\w+)'\s*,\s*@LockOwner\s*=\s*N'(\w+)'\s*,\s*@LockTimeout\s*=\s*(-?\d+)`)
	resource := regexp.MustCompile(`(?is)@resource\s+NVARCHAR\s*\(\s*255\s*\)\s*=\s*(CONCAT\s*\([^;]*?\)\s*\))`)
	take := func(name string) []string {
		text := lineComment.ReplaceAllString(queries.Get(name), "")
		a, r := args.FindStringSubmatch(text), resource.FindStringSubmatch(text)
		if a == nil || r == nil {
			t.Fatalf("%s.sql: no sp_getapplock of @resource (NVARCHAR(255) = CONCAT(...)) read", name)
		}
		return []string{r[1], a[2], a[3], a[4]}
	}
	single, election := take("single_node_lock"), take("lease_attempt_elect")
	if single[0] != election[0] {
		t.Errorf("the election takes %s; the single node %s: two locks", election[0], single[0])
	}
	if want := []string{single[0], "Exclusive", "Session", "0"}; !slices.Equal(single, want) {
		t.Errorf("the single node takes %v; want %v", single, want)
	}
	if want := []string{single[0], "Shared", "Transaction", "0"}; !slices.Equal(election, want) {
		t.Errorf("the election takes %v; want %v (shared among electors, held to its commit, never waiting)", election, want)
	}
}

// A single node whose lock session drops takes the lock again. While its
// previous session still holds it (the server has not seen it end), no other
// process can: it tries again. Until it holds the lock again its zero-fence
// writes are refused (ErrLockDown), and let through once it does. If
// another process took it meanwhile, the node is told (the channel) and the
// store refuses its zero-fence writes from then on, before the fence is
// read; a clustered node's writes are not its business.
func TestASingleNodeWhoseLockWasTakenMeanwhileStops(t *testing.T) {
	defer func(d time.Duration) { singleNodeCheck = d }(singleNodeCheck)
	singleNodeCheck = 5 * time.Millisecond
	ctx := context.Background()
	d := &fakeDriver{}
	db := sql.OpenDB(fakeConnector{d: d})
	defer db.Close()
	s := &Store{db: db, lease: db}
	s.single.db = db
	defer s.single.Close()
	first := time.Unix(100, 0)
	d.set("single_node_lock", []driver.Value{int64(0), int64(51), first})
	lost, err := s.HoldSingleNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ingest := func(f storage.Fence) error {
		_, err := s.MessageIngest(ctx, storage.MessageIngestParams{Fence: f, Messages: []storage.NewMessage{{Inbound: "in", ControlID: "C1", Payload: []byte("MSH|"), Status: storage.MessageRouted}}})
		return err
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("still waiting for %s", what)
			}
		}
	}
	notLost := func(when string) {
		t.Helper()
		select {
		case err := <-lost:
			t.Fatalf("%s: the single node was told %v; want it to hold on", when, err)
		default:
		}
		if err := ingest(storage.Fence{}); errors.Is(err, storage.ErrSingleNodeTaken) {
			t.Fatalf("%s: a single-node write: %v; want it let through", when, err)
		}
	}
	notLost("holding the lock")
	down := func(when string) {
		t.Helper()
		fences := d.ran("fence")
		if err := ingest(storage.Fence{}); !errors.Is(err, storage.ErrLockDown) || d.ran("fence") != fences {
			t.Fatalf("%s: a single-node write: %v; want it refused (ErrLockDown) before any statement", when, err)
		}
	}

	// change sets what the fake answers from now on, all at once, and
	// says how many times the lock was asked for until then.
	change := func(pingErr error, lock, holder []driver.Value) int {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.pingErr = pingErr
		d.setLocked("single_node_lock", lock)
		if holder != nil {
			d.setLocked("single_node_holder", holder)
		}
		return d.ranLocked("single_node_lock")
	}
	reset := errors.New("connection reset")

	// The session drops; the server still shows it holding the lock.
	n := change(reset, []driver.Value{int64(-1), int64(53), time.Unix(200, 0)}, []driver.Value{int64(51), first, "mf first", "host-a"})
	waitFor("three attempts to take the lock again", func() bool { return d.ran("single_node_lock") >= n+3 })
	notLost("its previous session still holding the lock")
	down("its previous session still holding the lock")

	// Its previous session ended: the lock is taken again, on session 54.
	n = change(nil, []driver.Value{int64(0), int64(54), time.Unix(300, 0)}, nil)
	waitFor("the lock taken again", func() bool { return d.ran("single_node_lock") > n })
	time.Sleep(20 * singleNodeCheck) // pings that pass take nothing again
	if got := d.ran("single_node_lock"); got != n+1 {
		t.Fatalf("the lock was taken %d times after it was held again; want once", got-n)
	}
	notLost("holding the lock again")
	waitFor("the writes let through again", func() bool {
		return !errors.Is(ingest(storage.Fence{}), storage.ErrLockDown)
	})

	// It drops; the holder cannot be named (gone when looked for, or
	// sys.dm_tran_locks unreadable without VIEW SERVER STATE): it may be
	// its own session, so the node tries again rather than stop.
	d.mu.Lock()
	d.pingErr = reset
	d.setLocked("single_node_lock", []driver.Value{int64(-1), int64(56), time.Unix(320, 0)})
	d.setLocked("single_node_holder")
	n = d.ranLocked("single_node_lock")
	d.mu.Unlock()
	waitFor("three attempts with the holder not named", func() bool { return d.ran("single_node_lock") >= n+3 })
	notLost("the holder not named")
	down("the holder not named") // for as long as it cannot be named

	// It drops again, and another process takes the lock meanwhile.
	change(reset, []driver.Value{int64(-1), int64(55), time.Unix(400, 0)}, []driver.Value{int64(60), time.Unix(350, 0), "mf second", "host-b"})
	select {
	case err := <-lost:
		if !errors.Is(err, storage.ErrSingleNodeTaken) || !strings.Contains(err.Error(), `"mf second"`) {
			t.Fatalf("the single node was told %v; want ErrSingleNodeTaken naming mf second", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the single node was not told that another took its lock")
	}
	fences := d.ran("fence")
	if err := ingest(storage.Fence{}); !errors.Is(err, storage.ErrSingleNodeTaken) {
		t.Fatalf("a single-node write after another took the lock: %v; want ErrSingleNodeTaken", err)
	}
	if d.ran("fence") != fences {
		t.Fatal("the refused write ran the fence: it must be refused before any statement")
	}
	if err := ingest(storage.Fence{Owner: "node-a", Term: 3}); errors.Is(err, storage.ErrSingleNodeTaken) || d.ran("fence") != fences+1 {
		t.Fatalf("a clustered write: %v; want it fenced as ever", err)
	}
}

// The sessions carry the node's name as program_name, which a second single
// node's error names, unless the store url sets its own app name.
func TestSessionsAreNamedUnlessTheURLNamesThem(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"sqlserver://mf@db.internal?database=mf", "mf node-a"},
		{"sqlserver://mf@db.internal?database=mf&app+name=hl7", "hl7"},
		{"server=db.internal;user id=mf;database=mf;Application Name=hl7", "hl7"},
	} {
		cfg, err := connectorConfig(Options{URL: tc.url, ApplicationName: "mf node-a"})
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if cfg.AppName != tc.want {
			t.Errorf("%s: app name %q, want %q", tc.url, cfg.AppName, tc.want)
		}
	}
}

// A hint that names a filtered index leaves the optimizer no plan, and the
// statement fails, unless the statement's own predicate implies the index's
// filter: every hint of a filtered index comes with its filter repeated word
// for word (an alias prefix aside), the sure way to imply it.
func TestFilteredIndexHintsRepeatTheirFilter(t *testing.T) {
	code := func(text string) string { return lineComment.ReplaceAllString(text, "") }
	flat := func(text string) string {
		text = regexp.MustCompile(`\b\w+\.(\w+)`).ReplaceAllString(text, "$1") // q.status: status
		return strings.Join(strings.Fields(text), " ")
	}
	ms, err := storage.LoadMigrations(migrationsFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	filters := map[string]string{}
	for _, m := range ms {
		for _, f := range regexp.MustCompile(`(?is)\bCREATE\s+INDEX\s+(\w+)\s+ON\s+\w+\s*\([^)]*\)\s+WHERE\s+([^;]*);`).FindAllStringSubmatch(code(m.SQL), -1) {
			filters[f[1]] = flat(f[2])
		}
	}
	if _, ok := filters["mf_queue_dead_unsent"]; !ok {
		t.Fatalf("no filtered index mf_queue_dead_unsent in the migrations; found %v", filters)
	}
	hints := 0
	for name, text := range queries {
		for _, stmt := range strings.Split(code(text), ";") {
			for _, h := range regexp.MustCompile(`(?i)\bINDEX\s*\(\s*(\w+)\s*\)`).FindAllStringSubmatch(stmt, -1) {
				filter, ok := filters[h[1]]
				if !ok {
					continue
				}
				hints++
				if !strings.Contains(flat(stmt), filter) {
					t.Errorf("%s.sql: a hint names %s without its filter %q word for word", name, h[1], filter)
				}
			}
		}
	}
	if hints == 0 {
		t.Fatal("no hint of a filtered index found")
	}
}

// Application locks are per database: each of the dialect's names has the
// schema the store's tables are in (SCHEMA_NAME()), so that stores in two
// schemas of one database do not serialise each other's ingests and
// migrations, and every statement that takes a lock names it alike. The
// unscoped names of an older mf (N'mf_ingest', N'mf_migrate') are taken only
// shared, so that the older mf's nodes, which take them exclusive, still
// wait for this one's during a rolling upgrade (message_ingest.sql).
func TestApplicationLocksAreNamedByTheSchema(t *testing.T) {
	code := func(text string) string { return lineComment.ReplaceAllString(text, "") }
	call := regexp.MustCompile(`(?is)\bsp_getapplock\s+@Resource\s*=\s*(N'[^']*'|@\w+)\s*,\s*@LockMode\s*=\s*N'(\w+)'`)
	legacy := map[string]bool{"N'mf_ingest'": true, "N'mf_migrate'": true}
	names := map[string]string{} // variable: its CONCAT, the same in every file
	takes := map[string]int{}
	for name, text := range queries {
		text = code(text)
		n := strings.Count(strings.ToLower(text), "sp_getapplock")
		calls := call.FindAllStringSubmatch(text, -1)
		if len(calls) != n {
			t.Errorf("%s.sql: %d calls of sp_getapplock, %d read here (@Resource, then @LockMode)", name, n, len(calls))
		}
		shared := map[string]bool{}
		for _, c := range calls {
			resource, mode := c[1], c[2]
			if legacy[resource] {
				if mode != "Shared" {
					t.Errorf("%s.sql: %s taken %s: an older mf's name, to be taken Shared only (two schemas' stores would serialise on it)", name, resource, mode)
				}
				shared[resource] = true
				continue
			}
			if !strings.HasPrefix(resource, "@") {
				t.Errorf("%s.sql: lock %s is not named by the schema (CONCAT(..., SCHEMA_NAME()))", name, resource)
				continue
			}
			decl := regexp.MustCompile(`(?is)` + resource + `\s+NVARCHAR\s*\(\s*255\s*\)\s*=\s*(CONCAT\s*\(\s*N'([^']*)'\s*,\s*SCHEMA_NAME\s*\(\s*\)\s*\))`).FindStringSubmatch(text)
			if decl == nil {
				t.Errorf("%s.sql: %s is not declared NVARCHAR(255) = CONCAT(N'...', SCHEMA_NAME())", name, resource)
				continue
			}
			if prev, ok := names[resource]; ok && prev != decl[1] {
				t.Errorf("%s.sql: %s is %s; elsewhere %s: one lock, two names", name, resource, decl[1], prev)
			}
			names[resource] = decl[1]
			takes[resource]++
			// The older mf's name of this lock, taken shared before it.
			if old := "N'" + strings.Fields(decl[2] + " x")[0] + "'"; legacy[old] && !shared[old] {
				t.Errorf("%s.sql: %s is taken without %s shared before it: an older mf's node would not wait for it", name, resource, old)
			}
		}
	}
	if takes["@ingest"] != 3 || takes["@migrate"] != 1 {
		t.Errorf("the ingest lock taken in %d statements (want 3: ingest, resend, resend-dead), the migration lock in %d (want 1)", takes["@ingest"], takes["@migrate"])
	}
}

// Pending migrations on a schema in use wait at most 2 s for each lock and,
// on a lock timeout (1222) or a deadlock (1205), roll back and try the whole
// transaction again, a bounded number of times, as on PostgreSQL; the
// session's lock timeout is undone before its connection goes back to the
// pool. A new schema sets no timeout. Before, a migration waited as long as
// any lock was held, and the primary's writes behind it.
func TestMigrationsWaitForLocksBoundedAndTryAgain(t *testing.T) {
	defer func(d time.Duration) { migratePause = d }(migratePause)
	migratePause = time.Millisecond
	ctx := context.Background()
	store := func(applied []driver.Value, failures int, number int32) (*Store, *fakeDriver) {
		d := &fakeDriver{}
		if applied != nil {
			d.set("migrate_applied", applied)
		}
		n := 0
		d.execErr = func(name string) error {
			if name != "" { // only migration batches fail
				return nil
			}
			if n++; failures < 0 || n <= failures {
				return fmt.Errorf("exec: %w", mssql.Error{Number: 3621, All: []mssql.Error{{Number: number}}})
			}
			return nil
		}
		db := sql.OpenDB(fakeConnector{d: d})
		t.Cleanup(func() { db.Close() })
		return &Store{db: db, lease: db}, d
	}
	// order says the statements run in order, named ones by name and
	// migration batches as "batch".
	order := func(d *fakeDriver) []string {
		d.mu.Lock()
		defer d.mu.Unlock()
		var out []string
		for _, c := range d.calls {
			if c.name == "" {
				c.name = "batch"
			}
			if len(out) == 0 || out[len(out)-1] != c.name {
				out = append(out, c.name)
			}
		}
		return out
	}

	s, d := store([]driver.Value{int64(1)}, 2, errLockTimeout)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("two lock timeouts, then the locks: %v; want the migrations applied", err)
	}
	for _, name := range []string{"migrate_lock", "migrate_lock_timeout", "migrate_lock_timeout_reset"} {
		if got := d.ran(name); got != 3 {
			t.Errorf("%s ran %d times; want 3 (each attempt)", name, got)
		}
	}
	want := []string{"migrate_lock", "migrate_table", "migrate_applied", "migrate_lock_timeout", "batch", "migrate_lock_timeout_reset"}
	if got := order(d); !slices.Equal(got[:len(want)], want) {
		t.Errorf("an attempt ran %v; want %v: the timeout set once the schema is found in use, before the first migration, and undone after", got[:len(want)], want)
	}

	s, d = store([]driver.Value{int64(1)}, 1, errDeadlock)
	if err := s.Migrate(ctx); err != nil || d.ran("migrate_lock") != 2 {
		t.Fatalf("a deadlock, then the locks: %v after %d attempts; want the migrations applied at the second", err, d.ran("migrate_lock"))
	}

	s, d = store([]driver.Value{int64(1)}, -1, errLockTimeout)
	err := s.Migrate(ctx)
	if err == nil || !strings.Contains(err.Error(), "1222") || !strings.Contains(err.Error(), "30 attempts") {
		t.Fatalf("locks held throughout: %v; want an error naming 1222 and the attempts", err)
	}
	if got := d.ran("migrate_lock"); got != migrateAttempts {
		t.Errorf("%d attempts; want %d", got, migrateAttempts)
	}
	if d.ran("migrate_lock_timeout_reset") != migrateAttempts {
		t.Errorf("the lock timeout undone %d times in %d attempts", d.ran("migrate_lock_timeout_reset"), migrateAttempts)
	}

	s, d = store(nil, -1, 8152) // a new schema; an error that is no lock conflict
	if err := s.Migrate(ctx); err == nil || d.ran("migrate_lock") != 1 || d.ran("migrate_lock_timeout") != 0 || d.ran("migrate_lock_timeout_reset") != 0 {
		t.Fatalf("a new schema whose migration fails otherwise: %v, %d attempts, timeout set %d times; want the error at once, no timeout", err, d.ran("migrate_lock"), d.ran("migrate_lock_timeout"))
	}
}

// mf's tables are found by one-part names, which SQL Server resolves in the
// login's default schema first, then in dbo, while the single-node and
// ingest locks are named by the default schema: tables found in dbo by a
// login of another default schema would run under another lock than dbo's
// own nodes. migrate_table.sql refuses them, naming both schemas, and
// creates the migrations' table only where none was found. (Checked by
// reading the statement: no SQL Server runs here.)
func TestTablesOfAnotherSchemaThanTheDefaultAreRefused(t *testing.T) {
	text := lineComment.ReplaceAllString(queries["migrate_table"], "")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?is)@found\s+SYSNAME\s*=\s*OBJECT_SCHEMA_NAME\s*\(\s*OBJECT_ID\s*\(\s*N'mf_schema_migrations'`),
		regexp.MustCompile(`(?is)IF\s+@found\s+IS\s+NOT\s+NULL\s+AND\s+@found\s*<>\s*SCHEMA_NAME\(\)\s+BEGIN.*THROW\s+51010\s*,\s*@refusal`),
		regexp.MustCompile(`(?is)IF\s+@found\s+IS\s+NULL\s+CREATE\s+TABLE\s+mf_schema_migrations`),
	} {
		if !want.MatchString(text) {
			t.Errorf("migrate_table.sql does not match %s", want)
		}
	}
	if strings.Contains(text, "OBJECT_ID(N'mf_schema_migrations', N'U') IS NULL") {
		t.Error("migrate_table.sql still creates the table on a one-part lookup alone")
	}
}

// An INSTEAD OF trigger that skips a row leaves OUTPUT returning it as if
// inserted, so the ids' count matched and the message was answered AA with
// nothing stored (the fault 263e78e fixed on PostgreSQL). message_ingest.sql
// looks up every id it returned after both inserts, before its result, and
// throws errSkippedRow, which the dialect refuses (AR). (Checked by reading
// the statement: no SQL Server runs here.)
func TestAnIngestWhoseRowATriggerSkippedIsRefused(t *testing.T) {
	text := lineComment.ReplaceAllString(queries["message_ingest"], "")
	check := regexp.MustCompile(`(?is)INSERT\s+INTO\s+mf_queue.*` +
		`IF\s+EXISTS\s*\(\s*SELECT\s+1\s+FROM\s+@message_ids\s+AS\s+i\s+WHERE\s+NOT\s+EXISTS\s*\(\s*SELECT\s+1\s+FROM\s+mf_messages\s+AS\s+m\s+WHERE\s+m\.id\s*=\s*i\.id\s*\)\s*\)\s*` +
		`OR\s+EXISTS\s*\(\s*SELECT\s+1\s+FROM\s+@queue_ids\s+AS\s+i\s+WHERE\s+NOT\s+EXISTS\s*\(\s*SELECT\s+1\s+FROM\s+mf_queue\s+AS\s+q\s+WHERE\s+q\.id\s*=\s*i\.id\s*\)\s*\)\s*` +
		`BEGIN\s+THROW\s+51207\s*,.*SELECT\s+CAST\(0\s+AS\s+INT\)\s+AS\s+kind`)
	if !check.MatchString(text) {
		t.Errorf("message_ingest.sql does not look up its returned ids after both inserts and throw 51207 before its result")
	}
	if errSkippedRow != 51207 {
		t.Errorf("errSkippedRow %d; message_ingest.sql throws 51207", errSkippedRow)
	}
	err := fmt.Errorf("exec: %w", mssql.Error{Number: errSkippedRow})
	if !errors.Is(refusal(err), storage.ErrRefused) {
		t.Errorf("refusal of SQL Server error %d: %v; want storage.ErrRefused", errSkippedRow, refusal(err))
	}
}
