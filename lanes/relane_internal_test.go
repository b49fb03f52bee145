package lanes

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/sqlite"
)

func relaneConfig(t *testing.T, routes string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
[[inbound]]
name = "adt_in"
type = "mllp"
listen = "127.0.0.1:20001"

[[inbound]]
name = "lab_in"
type = "mllp"
listen = "127.0.0.1:20002"

[[outbound]]
name = "emr"
type = "file"
directory = "out"

[[outbound]]
name = "ris"
type = "file"
directory = "out2"
`+routes), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// LaneKeys changes exactly when a destination's rows would be laned
// otherwise.
func TestLaneKeysSayHowEachDestinationIsLaned(t *testing.T) {
	base := relaneConfig(t, `
[[route]]
from = "adt_in"
to = ["emr", "ris"]
lane_key = "PID-3.1"
[[route]]
from = "lab_in"
to = ["emr"]
`)
	got := LaneKeys(base)
	if want := map[string]string{"emr": "adt_in=PID-3.1;lab_in=", "ris": "adt_in=PID-3.1"}; len(got) != 2 || got["emr"] != want["emr"] || got["ris"] != want["ris"] {
		t.Fatalf("LaneKeys = %q, want %q", got, want)
	}
	// The same laning written otherwise (routes in another order, a filter
	// on a route whose key is the only one from its inbound): the same.
	same := relaneConfig(t, `
[[route]]
from = "lab_in"
to = ["emr"]
[[route]]
from = "adt_in"
to = ["ris", "emr"]
lane_key = "PID-3.1"
filter = { "MSH-9.1" = "ADT" }
`)
	if s := LaneKeys(same); s["emr"] != got["emr"] || s["ris"] != got["ris"] {
		t.Fatalf("LaneKeys of the same laning = %q, want %q", s, got)
	}
	// Two keys from one inbound: the filters decide, so they count.
	mixed := LaneKeys(relaneConfig(t, `
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
filter = { "MSH-9.1" = "ADT" }
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "MSH-4"
`))
	if want := `adt_in=[PID-3.1 if {"MSH-9.1":"ADT"}, MSH-4 if null]`; mixed["emr"] != want {
		t.Fatalf("LaneKeys of two keys from one inbound = %q, want %q", mixed["emr"], want)
	}
}

// relaneOf gives the lane the router gives, falls back to the first route
// from the inbound when no filter matches, and to the destination's one
// lane_key when its inbound no longer routes there.
func TestRelaneOfIsTheRoutersLane(t *testing.T) {
	cfg := relaneConfig(t, `
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
filter = { "MSH-9.1" = "ADT" }
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "MSH-4"
filter = { "MSH-9.1" = "ORU" }
`)
	r, err := NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(s string) *hl7.Message {
		m, err := hl7.Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	adt := parse("MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01|1|P|2.5.1\rPID|1||P1 ^^^HOSP^MR\r")
	orm := parse("MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ORM^O01|2|P|2.5.1\rPID|1||P1^^^HOSP^MR\r")
	for _, tc := range []struct {
		name, inbound string
		m             *hl7.Message
		want          string
		ok            bool
	}{
		{"the router's lane (its key read as the router reads it)", "adt_in", adt, r.Route("adt_in", adt)[0].Lane, true},
		{"no filter matches: the first route's", "adt_in", orm, "emr/P1", true},
		{"no route from the inbound, routes that disagree: kept", "lab_in", adt, "", false},
	} {
		lane, ok := r.relaneOf(tc.inbound, "emr", tc.m)
		if lane != tc.want || ok != tc.ok {
			t.Errorf("%s: relaneOf = %q, %v; want %q, %v", tc.name, lane, ok, tc.want, tc.ok)
		}
	}
	if r.Route("adt_in", adt)[0].Lane != "emr/P1" {
		t.Fatalf("router lane %q", r.Route("adt_in", adt)[0].Lane)
	}
	one, err := NewRouter(relaneConfig(t, `
[[route]]
from = "adt_in"
to = ["emr"]
lane_key = "PID-3.1"
`))
	if err != nil {
		t.Fatal(err)
	}
	if lane, ok := one.relaneOf("lab_in", "emr", adt); lane != "emr/P1" || !ok {
		t.Errorf("no route from the inbound, one lane_key: relaneOf = %q, %v; want emr/P1", lane, ok)
	}
}

// failingRelane fails every QueueRelane after the first: a move cut short
// (the term lost, the database gone) between two pages.
type failingRelane struct {
	storage.Store
	calls int
}

func (s *failingRelane) QueueRelane(ctx context.Context, p storage.QueueRelaneParams) (int64, error) {
	if s.calls++; s.calls > 1 {
		return 0, errors.New("injected: the database went away")
	}
	return s.Store.QueueRelane(ctx, p)
}

// A move cut short leaves some rows in lanes of the new lane_key and some
// in lanes of the old. The next graph, on either lane_key, must put them
// all in its own lanes: here a node on the old file takes over, whose
// lane_key was the one recorded before the move began.
func TestARelaneCutShortIsFinishedByTheNextGraphWhateverItsLaneKey(t *testing.T) {
	page := relanePage
	relanePage = 2
	t.Cleanup(func() { relanePage = page })
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	keyed := func(key string) (*config.Config, *Router) {
		cfg := relaneConfig(t, fmt.Sprintf("[[route]]\nfrom = \"adt_in\"\nto = [\"emr\"]\nlane_key = %q\n", key))
		r, err := NewRouter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, r
	}
	oldCfg, oldRouter := keyed("PID-3.1")
	newCfg, newRouter := keyed("MSH-4")
	var batch []storage.NewMessage
	for i := range 6 {
		p := []byte(fmt.Sprintf("MSH|^~\\&|EPIC|HOSP|LAB|HOSP|20261121090000||ADT^A01|%d|P|2.5.1\rPID|1||P%d^^^HOSP^MR\r", i, i))
		m, err := hl7.Parse(p)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, storage.NewMessage{Inbound: "adt_in", ControlID: fmt.Sprint(i), Payload: p,
			Status: storage.MessageRouted, Deliveries: oldRouter.Route("adt_in", m)})
	}
	if _, err := st.MessageIngest(ctx, storage.MessageIngestParams{Messages: batch}); err != nil {
		t.Fatal(err)
	}
	if err := Relane(ctx, st, storage.Fence{}, oldCfg, oldRouter, nil); err != nil { // records PID-3.1
		t.Fatal(err)
	}
	if err := Relane(ctx, &failingRelane{Store: st}, storage.Fence{}, newCfg, newRouter, nil); err == nil {
		t.Fatal("a move whose second page failed reported no error")
	}
	if err := Relane(ctx, st, storage.Fence{}, oldCfg, oldRouter, nil); err != nil {
		t.Fatal(err)
	}
	ls, err := st.QueueLanes(ctx, storage.QueueLanesParams{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range ls {
		got = append(got, l.Lane)
	}
	if len(got) != 6 || slices.Contains(got, "emr/HOSP") {
		t.Fatalf("lanes after a move cut short and a graph on the old lane_key: %q; want the six of PID-3.1, none of MSH-4", got)
	}
}

// RelaneBegin, run before the graph's inbounds store anything, records as
// unknown the laning of each destination whose lane_key changed, and only
// of those: then a move cut short is done again by the next graph, whatever
// its lane_key, for the rows stored during it too.
func TestRelaneBeginRecordsAChangedLaneKeyUnknown(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(t.TempDir(), "mf.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	both := func(key string) *config.Config {
		return relaneConfig(t, fmt.Sprintf("[[route]]\nfrom = \"adt_in\"\nto = [\"emr\"]\nlane_key = %q\n[[route]]\nfrom = \"lab_in\"\nto = [\"ris\"]\n", key))
	}
	oldCfg, newCfg := both("PID-3.1"), both("MSH-4")
	if moving, err := RelaneBegin(ctx, st, storage.Fence{}, oldCfg); err != nil || !slices.Equal(moving, []string{"emr", "ris"}) {
		t.Fatalf("RelaneBegin with nothing recorded: %v, %v; want [emr ris], nil", moving, err)
	}
	if have, err := st.QueueLaneKeys(ctx); err != nil || len(have) != 0 {
		t.Fatalf("lane keys after RelaneBegin with nothing recorded: %q, %v; want none written", have, err)
	}
	router, err := NewRouter(oldCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := Relane(ctx, st, storage.Fence{}, oldCfg, router, nil); err != nil {
		t.Fatal(err)
	}
	if moving, err := RelaneBegin(ctx, st, storage.Fence{}, oldCfg); err != nil || len(moving) != 0 {
		t.Fatalf("RelaneBegin on the lane_keys recorded: %v, %v; want none, nil", moving, err)
	}
	if moving, err := RelaneBegin(ctx, st, storage.Fence{}, newCfg); err != nil || !slices.Equal(moving, []string{"emr"}) {
		t.Fatalf("RelaneBegin on a changed lane_key: %v, %v; want [emr], nil", moving, err)
	}
	have, err := st.QueueLaneKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := LaneKeys(oldCfg)["ris"]; len(have) != 2 || have["emr"] != "" || have["ris"] != want {
		t.Fatalf("lane keys after RelaneBegin on emr's changed lane_key: %q; want emr unknown (\"\"), ris %q", have, want)
	}
}
