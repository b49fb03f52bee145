package actors_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/messagefoundry/mf/actors"
	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/config"
	"github.com/messagefoundry/mf/internal/tlsfiles"
	"github.com/messagefoundry/mf/leadership"
	"github.com/messagefoundry/mf/storage"
)

// certDeadline bounds the wait for a series to follow a renewal: a look
// every tlsfiles.IdleLook at the most, and some.
const certDeadline = 3 * tlsfiles.IdleLook

// A standby runs no listener and no destination, yet exports the expiry of
// their certificates, which it serves once elected. After an operator
// renewed the files on every node, its series kept the old certificate's
// date until its next start, reload or election: MfCertificateExpiresSoon
// went on firing for every standby, asking to renew what was renewed, and
// the series could not tell whether the standby's own copy was renewed.
// Root now looks at those files while no graph runs: a renewal is followed,
// a pair that does not load (half written) keeps the series as it was, the
// looks resume when the node steps down, and a reload replaces the files
// looked at.
func TestAStandbysCertificateSeriesFollowRenewals(t *testing.T) {
	// A look at each tick, at most once a tlsfiles.CheckInterval a pair;
	// every tlsfiles.IdleLook in production.
	actors.SetStandbyCertLook(t, 100*time.Millisecond)
	dir := t.TempDir()
	p := enginetest.NewPKI(t, dir)
	now := time.Now().Truncate(time.Second)
	days := func(n int) time.Time { return now.Add(time.Duration(n) * 24 * time.Hour) }
	renew := func(name string, until time.Time) (cert, key string) {
		t.Helper()
		return p.ServerCertValid(t, dir, name, now.Add(-time.Hour), until)
	}
	inCert, inKey := renew("standby_in", days(20))
	outCert, outKey := renew("standby_out", days(25))
	otherCert, otherKey := renew("standby_in_other", days(30))
	const listen = "127.0.0.1:24101"
	site := func(inCert, inKey string) *config.Config {
		t.Helper()
		cfg, err := config.Parse([]byte(fmt.Sprintf(`
[[inbound]]
name = "standby_in"
type = "mllp"
listen = %q
tls_cert = %q
tls_key = %q

[[outbound]]
name = "standby_out"
type = "mllp"
address = "127.0.0.1:1"
tls = true
tls_cert = %q
tls_key = %q

[[route]]
from = "standby_in"
to = ["standby_out"]
`, listen, inCert, inKey, outCert, outKey)), "test.toml")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	next := site(otherCert, otherKey)
	e := startScripted(t, site(inCert, inKey), func(o *actors.Options) {
		o.Reload = func() (*config.Config, error) { return next, nil }
	})
	in := `mf_tls_cert_expiry_timestamp_seconds{kind="inbound",name="standby_in"}`
	out := `mf_tls_cert_expiry_timestamp_seconds{kind="outbound",name="standby_out"}`
	is := func(series string, at time.Time) bool {
		got := scrape(series)
		return len(got) == 1 && got[0] == fmt.Sprintf("%s %d", series, at.Unix())
	}
	follows := func(what, series string, at time.Time) {
		t.Helper()
		enginetest.WaitFor(t, what, certDeadline, func() bool { return is(series, at) })
	}
	// looked returns once every pair has been looked at after the files
	// were last written: the outbound's certificate renewed twice, each
	// followed, the second by a round of looks that began after the first
	// ended (the pairs, loaded together, are due together).
	outDays := 100
	looked := func() {
		t.Helper()
		for range 2 {
			outDays++
			renew("standby_out", days(outDays))
			follows("the outbound's series to follow its renewal", out, days(outDays))
		}
	}
	follows("the inbound's series at start", in, days(20))
	follows("the outbound's series at start", out, days(25))

	// Renewed on disk, in place, as on every node.
	renew("standby_in", days(200))
	renew("standby_out", days(205))
	follows("the standby's inbound series to follow the renewal", in, days(200))
	follows("the standby's outbound series to follow the renewal", out, days(205))

	// Half written: a certificate that is not its key's. The series keeps
	// the date of the pair in place, and follows once the key is there.
	halfCert, halfKey := renew("standby_in_half", days(300))
	enginetest.CopyFile(t, halfCert, inCert)
	looked()
	if !is(in, days(200)) {
		t.Fatalf("with a certificate on disk that is not its key's: %q; want the date of the pair in place, %d", scrape(in), days(200).Unix())
	}
	enginetest.CopyFile(t, halfKey, inKey)
	follows("the inbound's series to follow the mended pair", in, days(300))

	// Elected, its listener looks at the files; stepped down, root again,
	// which loads them anew: half written then, they are warned of once,
	// leave the series as it was, and are followed once mended.
	e.tell(leadership.Changed{Leader: true, Fence: storage.Fence{}, Reason: "elected"})
	enginetest.WaitFor(t, "the listener to open", 5*time.Second, func() bool { return open(listen) })
	halfCert, _ = renew("standby_in_half", days(350))
	enginetest.CopyFile(t, halfCert, inCert)
	e.tell(leadership.Changed{Leader: false, Fence: storage.Fence{}, Reason: "renew-lost"})
	enginetest.WaitFor(t, "the listener to close", 5*time.Second, func() bool { return !open(listen) })
	enginetest.WaitFor(t, "the pair that does not load to be warned of", certDeadline, func() bool {
		return strings.Contains(e.logs.String(), "do not load now")
	})
	if !is(in, days(300)) {
		t.Fatalf("stepped down with a certificate on disk that is not its key's: %q; want the date of the pair the listener served, %d", scrape(in), days(300).Unix())
	}
	renew("standby_in", days(400))
	follows("the inbound's series to follow a renewal after the node stepped down", in, days(400))
	if n := strings.Count(e.logs.String(), "do not load now"); n != 1 {
		t.Errorf("the pair that did not load was warned of %d times; want once", n)
	}

	// A reload that gives the inbound other files: those are looked at,
	// the old ones no more.
	e.reload(t, 2)
	follows("the inbound's series after the reload", in, days(30))
	renew("standby_in", days(500))
	renew("standby_in_other", days(600))
	follows("the inbound's series to follow its new files", in, days(600))
	looked()
	if !is(in, days(600)) {
		t.Fatalf("after the files the reload took out were renewed: %q; want the date of its new files, %d", scrape(in), days(600).Unix())
	}
}
