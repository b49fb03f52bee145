package actors_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/hl7"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// A term that ends (its leadership lost: the database unreachable, say)
// while a delivery is in hand cuts the send off, and the lane reports it to
// root as the fence's refusal is reported. Root logged it as one, at ERROR,
// "a write was refused by the fence: another node leads now", with the
// error "context canceled": seen in the chaos run (e2e) at every loss of a
// primary with deliveries in hand, beside the leadership actor's own ERROR
// of the loss, while no other node led yet (nor, after a database outage,
// ever did). Only a write the fence refused says another node leads.
func TestATermEndedWithADeliveryInHandIsNoFenceRefusal(t *testing.T) {
	got, done := make(chan struct{}, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		select { // never answers: the send stays in hand
		case <-r.Context().Done():
		case <-done:
		}
	}))
	defer srv.Close()
	defer close(done)
	listen := enginetest.FreeAddr(t)
	cfg := slowOutbound(t, "", listen, srv.URL)
	e := startScripted(t, cfg, func(o *actors.Options) { o.Reload = func() (*config.Config, error) { return cfg, nil } })
	ended := make(chan struct{})
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Ended: ended, Reason: "elected"})
	enginetest.WaitFor(t, "the port to open", 10*time.Second, func() bool { return open(listen) })
	if ack := enginetest.Dial(t, listen).Send(enginetest.ADT("T1", "P1")); ack.Code != hl7.AA {
		t.Fatalf("answered %s; want AA", ack.Code)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the destination got no request")
	}
	close(ended) // the leadership actor ends the term; its Changed follows
	enginetest.WaitFor(t, "the send to be abandoned", 10*time.Second, func() bool {
		return strings.Contains(e.logs.String(), "send abandoned")
	})
	enginetest.WaitFor(t, "the port to close", 10*time.Second, func() bool { return !open(listen) })
	e.tell(leadership.Changed{Leader: false, Fence: storage.Fence{}, Reason: "renew-lost"})
	// Root answers the reload only after it has handled everything before
	// it.
	e.tell(leadership.ConfigChanged{Version: 2})
	for loaded := false; !loaded; {
		select {
		case m := <-e.got:
			if _, ok := m.(leadership.Fenced); ok {
				t.Errorf("the leadership actor was told of a fence refusal (%+v) for a term it ended itself", m)
			}
			loaded = m == (leadership.ConfigLoaded{Version: 2})
		case <-time.After(10 * time.Second):
			t.Fatal("the reload was not confirmed")
		}
	}
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, "refused by the fence") {
			t.Errorf("a send cut off by the term's end was logged as a fence refusal: %s", line)
		}
	}
}
