package actors_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// A node that loses its lease with a delivery in hand and is elected again
// gets that delivery back at once. Its old graph has stopped by then (root
// waits for it), so the row, in flight under this process's own lease, is
// as stranded as another node's; left to its row lease (lease_ttl_seconds,
// 60 s by default), its lane waited that long.
func TestReElectionRecoversThisProcesssOwnStrandedDelivery(t *testing.T) {
	var requests atomic.Int32
	inHand, delivered := make(chan struct{}, 4), make(chan struct{}, 4)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // then the server cancels r.Context() when the sender hangs up
		if requests.Add(1) == 1 {
			inHand <- struct{}{}
			<-r.Context().Done() // the first send never ends by itself
			return
		}
		delivered <- struct{}{}
	}))
	t.Cleanup(dest.Close)
	listen := enginetest.FreeAddr(t)
	tell := startScripted(t, slowOutbound(t, "", listen, dest.URL), nil).tell

	// The zero fence: this SQLite store never had a cluster elected into it.
	tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "elected"})
	enginetest.WaitFor(t, "the port to open", 5*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("R1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("ingest answered %s", ack.Code)
	}
	select {
	case <-inHand:
	case <-time.After(10 * time.Second):
		t.Fatal("the message never reached the destination")
	}
	tell(leadership.Changed{Leader: false, Fence: storage.Fence{}, Reason: "renew-lost"})
	enginetest.WaitFor(t, "the port to close", 5*time.Second, func() bool { return !open(listen) })
	tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "elected"})
	select {
	case <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery this node had in hand when it lost its lease was not made again within 10 s of its re-election (its row lease is 60 s)")
	}
}
