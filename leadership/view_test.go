package leadership_test

import (
	"testing"
	"time"

	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

func TestLeaderOfFreshnessRule(t *testing.T) {
	now := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	node := func(id string, leader bool, status string, ago time.Duration) storage.Node {
		return storage.Node{NodeID: id, IsLeader: leader, Status: status, LastSeen: now.Add(-ago)}
	}
	cases := []struct {
		name  string
		nodes []storage.Node
		want  string
	}{
		{"one live leader", []storage.Node{node("a", true, "active", time.Second), node("b", false, "active", time.Second)}, "a"},
		{"a crashed leader is not reported", []storage.Node{node("a", true, "active", 31*time.Second), node("b", false, "active", time.Second)}, ""},
		{"two flagged during failover: the freshest", []storage.Node{node("a", true, "active", 9*time.Second), node("b", true, "active", time.Second)}, "b"},
		{"a left tombstone is not a leader", []storage.Node{node("a", true, "left", time.Second)}, ""},
		{"no nodes", nil, ""},
	}
	for _, tc := range cases {
		if got := leadership.LeaderOf(storage.NodeList{Nodes: tc.nodes, DBNow: now}, 30*time.Second); got != tc.want {
			t.Errorf("%s: leader %q, want %q", tc.name, got, tc.want)
		}
	}
}
