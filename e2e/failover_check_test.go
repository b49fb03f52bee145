package e2e

import (
	"testing"
	"time"
)

// The failover suite's verdict (checkDeliveries) on arrival orders made up
// to break each contract: the suite passes only when the engine keeps them,
// so without this nothing shows that its bookkeeping can say "lost",
// "reordered" or "not in flight" at all. It needs neither HAProxy nor
// PostgreSQL, and runs with every go test.
func TestFailoverVerdictCatchesEachBreach(t *testing.T) {
	rec := func(l, seq int) received { return received{ControlID: laneMessageID(l, seq), Patient: laneName(l)} }
	seqs := func(l int, ss ...int) []received {
		var out []received
		for _, s := range ss {
			out = append(out, rec(l, s))
		}
		return out
	}
	type want struct{ lost, reordered, dups, adjacent, foreign int }
	cases := []struct {
		name  string
		got   []received
		acked []int
		want  want
	}{
		{"in order", seqs(0, 0, 1, 2, 3), []int{4}, want{}},
		{"the head in flight sent again", seqs(0, 0, 1, 2, 2, 3), []int{4}, want{dups: 1, adjacent: 1}},
		{"a resent message delivered twice more", seqs(0, 0, 1, 1, 1, 2), []int{3}, want{dups: 2, adjacent: 2}},
		{"committed, never AA-acked, delivered", seqs(0, 0, 1, 2), []int{2}, want{}},
		{"AA-acked, never delivered", seqs(0, 0, 2), []int{3}, want{lost: 1}},
		{"AA-acked, nothing delivered", nil, []int{2}, want{lost: 2}},
		{"a newer one first", seqs(0, 0, 2, 1, 3), []int{4}, want{reordered: 1}},
		{"two older ones after a newer one", seqs(0, 0, 3, 1, 2), []int{4}, want{reordered: 2}},
		{"a newer one first, after an adjacent repeat", seqs(0, 0, 1, 1, 3, 2), []int{4}, want{reordered: 1, dups: 1, adjacent: 1}},
		{"a finished one sent again later", seqs(0, 0, 1, 2, 1, 3), []int{4}, want{dups: 1}},
		{"a run sent again", seqs(0, 0, 1, 2, 3, 2, 3), []int{4}, want{dups: 2}},
		{"lanes are separate", append(seqs(0, 0, 1), seqs(1, 0, 1)...), []int{2, 2}, want{}},
		{"another lane's patient", []received{{ControlID: laneMessageID(0, 0), Patient: laneName(1)}}, []int{1, 0}, want{lost: 1, foreign: 1}},
		{"never sent", []received{{ControlID: "PROBE", Patient: laneName(0)}}, []int{0}, want{foreign: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := checkDeliveries(c.got, c.acked)
			got := want{d.Lost, d.Reordered, d.Duplicates, d.Adjacent, d.Foreign}
			if got != c.want {
				t.Errorf("lost/reordered/duplicates/adjacent/foreign = %+v, want %+v (examples: %q)", got, c.want, d.Examples)
			}
			if d.inFlightOnly() != (c.want.dups == c.want.adjacent) {
				t.Errorf("inFlightOnly() = %v with %d duplicates, %d adjacent", d.inFlightOnly(), d.Duplicates, d.Adjacent)
			}
			if d.Delivered != len(c.got) {
				t.Errorf("delivered %d, want %d", d.Delivered, len(c.got))
			}
			acked := 0
			for _, n := range c.acked {
				acked += n
			}
			if d.Acked != acked {
				t.Errorf("acked %d, want %d", d.Acked, acked)
			}
			if bad := c.want.lost + c.want.reordered + c.want.foreign + c.want.dups - c.want.adjacent; bad > 0 && len(d.Examples) == 0 {
				t.Errorf("a breach without an example for the failure message")
			}
			// The suite fails a fault on these breaches, and on no others.
			if breach := c.want.lost+c.want.reordered+c.want.foreign > 0 || c.want.dups != c.want.adjacent; breach != (len(d.breaches()) > 0) {
				t.Errorf("breaches %q; want some: %v", d.breaches(), breach)
			}
			if all := allDelivered(c.got, c.acked); all != (c.want.lost == 0) {
				t.Errorf("allDelivered = %v with %d lost", all, c.want.lost)
			}
		})
	}
}

// A clean switchover's verdict on a repeat: the engine's if a copy was
// delivered twice or the old primary stored one (and did not answer it);
// the balancer's only if every copy was stored in the new term.
// A message an operator skipped (the chaos run's skips) is not lost when it
// never arrives; one skipped and delivered anyway is no breach either, and
// a skip does not cover another message of the lane.
func TestFailoverVerdictKnowsSkippedMessages(t *testing.T) {
	rec := func(l, seq int) received { return received{ControlID: laneMessageID(l, seq), Patient: laneName(l)} }
	got := []received{rec(0, 0), rec(0, 2), rec(0, 3)}
	d := checkDeliveriesSkipping(got, []int{5}, map[string]bool{laneMessageID(0, 1): true, laneMessageID(0, 3): true})
	if d.Lost != 1 || d.Skipped != 1 || d.Reordered != 0 || len(d.Problems) != 1 || d.Problems[0].ID != laneMessageID(0, 4) {
		t.Errorf("lost %d, skipped %d, reordered %d, problems %+v; want seq 1 skipped, seq 4 lost", d.Lost, d.Skipped, d.Reordered, d.Problems)
	}
}

func TestCleanVerdictTellsWhoRepeated(t *testing.T) {
	term := time.Date(2026, 11, 27, 4, 10, 27, 800_000_000, time.UTC)
	before, after, later := term.Add(-time.Millisecond), term.Add(time.Millisecond), term.Add(100*time.Millisecond)
	cut := []string{"04:10:27.801000 read ACK: EOF"}
	cases := []struct {
		name      string
		stored    []time.Time
		delivered int
		failed    []string
		byEngine  bool
	}{
		{"both copies stored in the new term, the session cut", []time.Time{after, later}, 2, cut, false},
		{"both copies stored in the new term, no attempt of the partner's failed", []time.Time{after, later}, 2, nil, true},
		{"both copies stored in the new term, the first answered AE", []time.Time{after, later}, 2, []string{"04:10:27.801000 answered AE"}, true},
		{"the old primary stored the first copy", []time.Time{before, later}, 2, cut, true},
		{"one copy delivered twice", []time.Time{later}, 2, cut, true},
		{"no copy in the database", nil, 2, cut, true},
	}
	for _, c := range cases {
		r := repeat{id: "L00-000004", stored: c.stored, termStart: term, delivered: make([]time.Time, c.delivered), failed: c.failed}
		if got := r.byEngine(); got != c.byEngine {
			t.Errorf("%s: byEngine() = %v, want %v (%s)", c.name, got, c.byEngine, r)
		}
	}
}

// The outage of a fault (the suite's published outage figures): the
// largest gap between AAs that begins with the last AA before the fault or
// later and ends by the window's end; none without an AA on either side.
func TestLargestGapIsTheOutageOfItsFault(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	at := func(ss ...float64) []time.Time {
		var out []time.Time
		for _, s := range ss {
			out = append(out, t0.Add(time.Duration(s*float64(time.Second))))
		}
		return out
	}
	cases := []struct {
		name       string
		aa         []time.Time
		fault, end float64
		want       []time.Time // From, To; nil: none
	}{
		{"the gap across the fault", at(0, 1, 2, 5, 6, 20), 2.5, 10, at(2, 5)},
		{"a larger gap after the fault", at(0, 1, 3, 4, 9, 20), 1.5, 10, at(4, 9)},
		{"a gap ending at the window's end counts", at(0, 1, 2, 3, 10), 1.5, 10, at(3, 10)},
		{"a gap ending after the window belongs to the next fault", at(0, 1, 3, 30), 0.5, 10, at(1, 3)},
		{"no AA before the fault", at(5, 6), 1, 10, nil},
		{"no AA after the fault", at(0, 1), 2, 10, nil},
	}
	for _, c := range cases {
		o, ok := largestGap(c.aa, at(c.fault)[0], at(c.end)[0])
		switch {
		case c.want == nil && ok:
			t.Errorf("%s: outage %v to %v, want none", c.name, o.From.Sub(t0), o.To.Sub(t0))
		case c.want != nil && (!ok || !o.From.Equal(c.want[0]) || !o.To.Equal(c.want[1])):
			t.Errorf("%s: outage %v to %v (found %v), want %v to %v", c.name, o.From.Sub(t0), o.To.Sub(t0), ok, c.want[0].Sub(t0), c.want[1].Sub(t0))
		}
	}
}

// A repeat is excused only with a fault between its two copies: at or
// before the later one, and at most the slack after the earlier one. Every
// message delivered twice in a run without faults, or a row sent again a
// long while after a fault, is named.
func TestRepeatsAwayFromFaultsAreNamed(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(id string, s float64) received {
		return received{ControlID: id, Patient: laneName(0), At: t0.Add(time.Duration(s * float64(time.Second)))}
	}
	fault := []time.Time{t0.Add(10 * time.Second)}
	slack := 4 * time.Second
	cases := []struct {
		name     string
		got      []received
		instants []time.Time
		want     int
	}{
		{"in flight at the fault, sent again after it", []received{at("A", 9.9), at("A", 13)}, fault, 0},
		{"first copy just after the fault, from a primary still acting", []received{at("A", 11), at("A", 13)}, fault, 0},
		{"no fault at all", []received{at("A", 1), at("A", 2), at("B", 3), at("B", 4)}, nil, 2},
		{"both copies before the fault", []received{at("A", 1), at("A", 2)}, fault, 1},
		{"the earlier copy long after the fault", []received{at("A", 20), at("A", 21)}, fault, 1},
		{"a message delivered once", []received{at("A", 1), at("B", 12)}, fault, 0},
	}
	for _, c := range cases {
		if got := repeatsAwayFromFaults(c.got, c.instants, slack); len(got) != c.want {
			t.Errorf("%s: %d named (%q), want %d", c.name, len(got), got, c.want)
		}
	}
}

// A copy the sink took and never answered (the chaos run's stalled sink)
// delivers nothing: the engine must send the message again. An engine that
// set such a row done (or aside) on the ACK's timeout lost it, and the
// verdict counted it delivered.
func TestACopyNeverAnsweredIsNoDelivery(t *testing.T) {
	taken := received{ControlID: laneMessageID(0, 1), Patient: laneName(0), Unanswered: true}
	first := received{ControlID: laneMessageID(0, 0), Patient: laneName(0)}
	if d := checkDeliveries([]received{first, taken}, []int{2}); d.Lost != 1 {
		t.Errorf("a message whose only copy went unanswered: %d lost, want 1", d.Lost)
	}
	again := taken
	again.Unanswered = false
	if d := checkDeliveries([]received{first, taken, again}, []int{2}); d.Lost != 0 || d.Duplicates != 1 || d.Adjacent != 1 {
		t.Errorf("unanswered, then sent again and answered: lost %d, duplicates %d (adjacent %d); want 0, 1 (1)", d.Lost, d.Duplicates, d.Adjacent)
	}
}
