package tlsfiles_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/internal/tlsfiles"
)

// loadServerPair makes a PKI and loads its server certificate and key as a
// Pair logging to logs.
func loadServerPair(t *testing.T) (p *enginetest.PKI, pair *tlsfiles.Pair, logs *bytes.Buffer) {
	t.Helper()
	p = enginetest.NewPKI(t, t.TempDir())
	logs = &bytes.Buffer{}
	pair, err := tlsfiles.LoadPair(tlsfiles.Endpoint{Kind: "inbound", Name: "adt_in"}, p.ServerCert, p.ServerKey, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	return p, pair, logs
}

// A renewal tool that writes the certificate and then the key leaves, in
// between, a certificate that is not its key's: a look then keeps the pair
// in service and says nothing, unless the files stay so past the settle
// time, which is an ERROR once a minute; once the key is there the renewed
// pair is served.
func TestAPairHalfRenewedIsKeptQuietUntilItSettles(t *testing.T) {
	p, pair, logs := loadServerPair(t)
	first := pair.Certificate().Leaf
	renewedCert, renewedKey := p.ServerCertValid(t, t.TempDir(), "renewed", time.Now().Add(-time.Hour), time.Now().Add(90*24*time.Hour))
	enginetest.CopyFile(t, renewedCert, p.ServerCert)

	now := time.Now()
	errors := func() int { return strings.Count(logs.String(), `"level":"error"`) }
	for _, look := range []struct {
		after  time.Duration
		errors int
	}{
		{2 * time.Second, 0},  // the key may be on its way
		{12 * time.Second, 1}, // past the settle time: wrong
		{20 * time.Second, 1}, // logged once a minute
		{73 * time.Second, 2},
	} {
		if got := pair.CertificateAt(now.Add(look.after)).Leaf; got.SerialNumber.Cmp(first.SerialNumber) != 0 {
			t.Fatalf("at +%v: serving serial %v, whose key is not there", look.after, got.SerialNumber)
		}
		if errors() != look.errors {
			t.Fatalf("at +%v: %d ERROR lines; want %d:\n%s", look.after, errors(), look.errors, logs.String())
		}
	}
	enginetest.CopyFile(t, renewedKey, p.ServerKey)
	if got := pair.CertificateAt(now.Add(75 * time.Second)).Leaf; got.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("the renewed pair is complete but the old certificate is still served")
	}
	if !strings.Contains(logs.String(), `"level":"info"`) || !strings.Contains(logs.String(), "renewed TLS certificate loaded from disk") {
		t.Fatalf("no line tells of the renewed certificate:\n%s", logs.String())
	}
}

// A certificate put in place that is out of its dates (an old file restored,
// an issuer's clock ahead) is not served while the one in service is valid:
// every handshake would fail.
func TestARenewalOutOfItsDatesIsNotServed(t *testing.T) {
	p, pair, logs := loadServerPair(t)
	first := pair.Certificate().Leaf
	p.ServerCertValid(t, filepath.Dir(p.ServerCert), "server", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	if got := pair.CertificateAt(time.Now().Add(time.Minute)).Leaf; got.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("serving serial %v, which has expired, in place of a valid certificate", got.SerialNumber)
	}
	if !strings.Contains(logs.String(), "expired on") || !strings.Contains(logs.String(), "the one in service is still valid") {
		t.Fatalf("the ERROR does not say the renewed certificate has expired:\n%s", logs.String())
	}
}

// A renewal renamed over the old files (as most tools write: a temporary
// file, then a rename), whose modification time is the old files', is seen
// all the same: the files are others (os.SameFile).
func TestAPairRenamedOverWithTheOldTimesIsSeen(t *testing.T) {
	p, pair, _ := loadServerPair(t)
	first := pair.Certificate().Leaf
	cert, key := p.ServerCertValid(t, t.TempDir(), "renewed", time.Now().Add(-time.Hour), time.Now().Add(90*24*time.Hour))
	for from, to := range map[string]string{cert: p.ServerCert, key: p.ServerKey} {
		fi, err := os.Stat(to)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(from, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	if got := pair.CertificateAt(time.Now().Add(2 * time.Second)).Leaf; got.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("the pair renamed over the old one is not served")
	}
}
