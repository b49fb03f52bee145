package cli

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// A clustered node's PostgreSQL sessions end a transaction left idle for
// leader_fence_timeout_seconds (leadership/doc.go, Liveness): a leader
// frozen inside one would otherwise hold the lease row, and keep every
// other node from being elected, for as long as the freeze lasts. A single
// node's sessions keep the server's setting.
func TestAClusteredNodesSessionsEndAnIdleTransactionAtTheFenceTimeout(t *testing.T) {
	url := pgtest.NewSchema(t)
	for _, c := range []struct {
		cluster string
		want    string
	}{
		{"[cluster]\nenabled = true\nheartbeat_seconds = 2\nleader_fence_timeout_seconds = 7\nleader_lease_ttl_seconds = 12\n", "7s"},
		{"", "0"},
	} {
		cfg, err := config.Parse([]byte("[store]\nbackend = \"postgres\"\nurl = \""+url+"\"\n"+c.cluster), "test.toml")
		if err != nil {
			t.Fatal(err)
		}
		st, err := openStore(context.Background(), cfg, true, "mf test", zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = st.(*postgres.Store).Pool().QueryRow(context.Background(), "SHOW idle_in_transaction_session_timeout").Scan(&got)
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("clustered %v: idle_in_transaction_session_timeout = %s; want %s", c.cluster != "", got, c.want)
		}
	}
}
