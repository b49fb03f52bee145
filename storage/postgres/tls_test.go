package postgres_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/actors/enginetest"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
)

// The store URL's TLS settings reach the driver untouched. The server says
// whether a session is encrypted (pg_stat_ssl), so this is checked on the
// wire: sslmode=disable gives a plain session; sslmode=require an encrypted
// one when the server offers TLS, and a refusal, never a silent downgrade,
// when it does not; verify-full against a CA that did not sign the server's
// certificate is refused.
func TestStoreURLTLSSettingsPassThrough(t *testing.T) {
	base := pgtest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	with := func(params map[string]string) string {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		for k, v := range params {
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	// encrypted opens a store on rawURL and asks the server whether the
	// session is encrypted.
	encrypted := func(rawURL string) (bool, error) {
		s, err := postgres.Open(ctx, postgres.Options{URL: rawURL, PoolSize: 1})
		if err != nil {
			return false, err
		}
		defer s.Close()
		var ssl bool
		err = s.Pool().QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl)
		return ssl, err
	}

	plain, err := encrypted(with(map[string]string{"sslmode": "disable"}))
	if err != nil || plain {
		t.Fatalf("sslmode=disable: encrypted %v, err %v", plain, err)
	}
	var serverTLS string
	s, err := postgres.Open(ctx, postgres.Options{URL: with(map[string]string{"sslmode": "disable"}), PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Pool().QueryRow(ctx, "SHOW ssl").Scan(&serverTLS)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}

	enc, err := encrypted(with(map[string]string{"sslmode": "require"}))
	switch {
	case serverTLS == "on" && (err != nil || !enc):
		t.Fatalf("sslmode=require against a server with TLS: encrypted %v, err %v", enc, err)
	case serverTLS != "on" && err == nil:
		t.Fatalf("sslmode=require against a server without TLS connected anyway (encrypted %v)", enc)
	}
	t.Logf("server ssl=%s; sslmode=require: encrypted %v (err %v)", serverTLS, enc, err)

	ca := enginetest.NewPKI(t, t.TempDir()).CAFile // a CA of the test's own
	if _, err := encrypted(with(map[string]string{"sslmode": "verify-full", "sslrootcert": ca})); err == nil {
		t.Fatal("sslmode=verify-full with a CA that did not sign the server's certificate connected")
	}
}

// MF_STORE_PASSWORD's value (Options.Password) replaces the URL's password
// and keeps everything else the URL says.
func TestPasswordOptionReplacesTheURLs(t *testing.T) {
	s, err := postgres.Open(context.Background(), postgres.Options{
		URL:      "postgres://mf:in-the-url@db.internal:5433/mf?sslmode=verify-full&application_name=mf",
		Password: "from-env", PoolSize: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cc := s.Pool().Config().ConnConfig
	if cc.Password != "from-env" || cc.User != "mf" || cc.Host != "db.internal" || cc.Port != 5433 ||
		cc.TLSConfig == nil || cc.TLSConfig.InsecureSkipVerify || cc.TLSConfig.ServerName != "db.internal" ||
		cc.RuntimeParams["application_name"] != "mf" {
		t.Fatalf("config: user %q password %q host %s:%d tls %+v params %v", cc.User, cc.Password, cc.Host, cc.Port, cc.TLSConfig, cc.RuntimeParams)
	}
}

// A pool size in the store URL (pgxpool's pool_max_conns) is refused with a
// pointer to [store] pool_size, which sets the pool's size: it was replaced
// by pool_size (5 unless set) without a word.
func TestPoolSizeInTheURLIsRefused(t *testing.T) {
	for _, u := range []string{
		"postgres://mf@db.internal:5432/mf?pool_max_conns=20",
		"host=db.internal user=mf dbname=mf pool_max_conns=20",
	} {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: u, PoolSize: 5})
		if err == nil {
			got := s.Pool().Config().MaxConns
			s.Close()
			t.Errorf("%s: opened with a pool of %d", u, got)
			continue
		}
		if !strings.Contains(err.Error(), "pool_max_conns") || !strings.Contains(err.Error(), "pool_size") {
			t.Errorf("%s: %v; want an error naming pool_max_conns and pool_size", u, err)
		}
	}
}

// A store url that lets connections to another host go unencrypted is
// warned about: they carry every message. pgx's default sslmode, prefer,
// falls back to plaintext when the server offers no TLS.
func TestAStoreURLThatMayGoUnencryptedIsWarnedAbout(t *testing.T) {
	for _, c := range []struct {
		url  string
		warn bool
	}{
		{"postgres://mf@db.internal:5432/mf", true},
		{"postgres://mf@db.internal:5432/mf?sslmode=prefer", true},
		{"postgres://mf@db.internal:5432/mf?sslmode=allow", true},
		{"postgres://mf@db.internal:5432/mf?sslmode=disable", true},
		{"host=db.internal user=mf dbname=mf", true},
		{"postgres://mf@db-a.internal,db-b.internal/mf?sslmode=disable", true},
		{"postgres://mf@db.internal:5432/mf?sslmode=require", false},
		{"postgres://mf@db.internal:5432/mf?sslmode=verify-full", false},
		{"postgres://mf@127.0.0.1:5432/mf?sslmode=disable", false},
		{"postgres://mf@localhost:5432/mf", false},
		{"postgres://mf@[::1]:5432/mf?sslmode=disable", false},
		{"host=/var/run/postgresql user=mf dbname=mf", false},
	} {
		var logs strings.Builder
		s, err := postgres.Open(context.Background(), postgres.Options{URL: c.url, PoolSize: 1, Log: zerolog.New(&logs)})
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		s.Close()
		if warned := strings.Contains(logs.String(), "unencrypted"); warned != c.warn {
			t.Errorf("%s: warned %v, want %v: %q", c.url, warned, c.warn, logs.String())
		}
		if strings.Contains(logs.String(), "mf@") {
			t.Errorf("%s: the warning quotes the url: %q", c.url, logs.String())
		}
	}
}

// Options.ApplicationName names the sessions unless the URL names them.
func TestApplicationNameUnlessTheURLSetsOne(t *testing.T) {
	for url, want := range map[string]string{
		"postgres://mf@db.internal/mf?sslmode=verify-full":                          "mf node-a",
		"postgres://mf@db.internal/mf?sslmode=verify-full&application_name=billing": "billing",
	} {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 1, ApplicationName: "mf node-a"})
		if err != nil {
			t.Fatal(err)
		}
		got := s.Pool().Config().ConnConfig.RuntimeParams["application_name"]
		s.Close()
		if got != want {
			t.Errorf("%s: application_name %q, want %q", url, got, want)
		}
	}
}

// A store url that encrypts but verifies nothing of the server (sslmode
// require without sslrootcert: pgx skips the certificate's check, as libpq
// does) is warned of as well: whoever can sit on the path to the database
// can pose as it and read every message and the password. require with
// sslrootcert verifies the chain (libpq's verify-ca), and is not.
func TestAStoreURLThatDoesNotVerifyTheServerIsWarnedAbout(t *testing.T) {
	ca := enginetest.NewPKI(t, t.TempDir()).CAFile
	for _, c := range []struct {
		url  string
		warn bool
	}{
		{"postgres://mf@db.internal:5432/mf?sslmode=require", true},
		{"host=db.internal user=mf dbname=mf sslmode=require", true},
		{"postgres://mf@db.internal:5432/mf?sslmode=require&sslrootcert=" + ca, false},
		{"postgres://mf@db.internal:5432/mf?sslmode=verify-ca&sslrootcert=" + ca, false},
		{"postgres://mf@db.internal:5432/mf?sslmode=verify-full", false},
		{"postgres://mf@127.0.0.1:5432/mf?sslmode=require", false},
		{"postgres://mf@db.internal:5432/mf?sslmode=disable", false}, // the plaintext warning's
	} {
		warning, err := postgres.CheckURL(c.url)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		if warned := strings.Contains(warning, "without verifying"); warned != c.warn {
			t.Errorf("%s: warned %v, want %v: %q", c.url, warned, c.warn, warning)
		}
		if strings.Contains(warning, "mf@") {
			t.Errorf("%s: the warning quotes the url: %q", c.url, warning)
		}
	}
}
