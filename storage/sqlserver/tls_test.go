package sqlserver

import (
	"context"
	"strings"
	"testing"

	"github.com/microsoft/go-mssqldb/msdsn"
	"github.com/rs/zerolog"
)

// The URL's transport security reaches the driver as written (no server is
// needed to check what the connector will do), and MF_STORE_PASSWORD's value
// replaces the URL's password without disturbing it.
func TestStoreURLTLSSettingsPassThrough(t *testing.T) {
	for _, tc := range []struct {
		url        string
		encryption msdsn.Encryption
		skipVerify bool
		serverName string
	}{
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=disable", msdsn.EncryptionDisabled, false, ""},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=true", msdsn.EncryptionRequired, false, "db.internal"},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=strict", msdsn.EncryptionStrict, false, "db.internal"},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=true&TrustServerCertificate=true", msdsn.EncryptionRequired, true, "db.internal"},
		{"sqlserver://mf@10.0.0.5:1433?database=mf&encrypt=true&hostNameInCertificate=sql.hosp.example", msdsn.EncryptionRequired, false, "sql.hosp.example"},
	} {
		cfg, err := connectorConfig(Options{URL: tc.url})
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if cfg.Encryption != tc.encryption {
			t.Errorf("%s: encryption %v, want %v", tc.url, cfg.Encryption, tc.encryption)
		}
		if tc.encryption == msdsn.EncryptionDisabled {
			if cfg.TLSConfig != nil {
				t.Errorf("%s: a TLS config for a plaintext connection", tc.url)
			}
			continue
		}
		if cfg.TLSConfig == nil {
			t.Fatalf("%s: no TLS config", tc.url)
		}
		if cfg.TLSConfig.InsecureSkipVerify != tc.skipVerify || cfg.TLSConfig.ServerName != tc.serverName {
			t.Errorf("%s: InsecureSkipVerify %v ServerName %q, want %v %q", tc.url,
				cfg.TLSConfig.InsecureSkipVerify, cfg.TLSConfig.ServerName, tc.skipVerify, tc.serverName)
		}
	}

	cfg, err := connectorConfig(Options{URL: "sqlserver://mf:in-the-url@db.internal?database=mf&encrypt=strict", Password: "from-env"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Password != "from-env" || cfg.User != "mf" || cfg.Encryption != msdsn.EncryptionStrict || cfg.Database != "mf" {
		t.Fatalf("password override: user %q password %q encryption %v database %q", cfg.User, cfg.Password, cfg.Encryption, cfg.Database)
	}
	if _, err := connectorConfig(Options{URL: "sqlserver://mf:hunter2@db.internal?encrypt=sometimes"}); err == nil {
		t.Fatal("an unknown encrypt value was accepted")
	} else if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("the parse error carries the password: %v", err)
	}
}

// A store url that lets connections to another host go unencrypted is
// warned about at Open, which parses the url and does not connect: they
// carry every message. go-mssqldb's default (encrypt=false) encrypts only
// the login packet unless the server forces encryption.
func TestAStoreURLThatMayGoUnencryptedIsWarnedAbout(t *testing.T) {
	for _, c := range []struct {
		url  string
		warn bool
	}{
		{"sqlserver://mf:hunter2@db.internal:1433?database=mf", true},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=false", true},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=optional", true},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=no", true},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=disable", true},
		{"sqlserver://mf@10.0.0.5/SQLEXPRESS?database=mf&encrypt=disable", true},
		{"server=db.internal;user id=mf;password=hunter2;database=mf", true},
		{"sqlserver://mf@127.0.0.1?database=mf&encrypt=disable&failoverpartner=db-b.internal", true},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=true", false},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=mandatory", false},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=strict", false},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=true&failoverpartner=db-b.internal", false},
		{"server=db.internal;user id=mf;database=mf;encrypt=true", false},
		{"sqlserver://mf@127.0.0.1:1433?database=mf&encrypt=disable", false},
		{"sqlserver://mf@localhost?database=mf", false},
		{"sqlserver://mf@LOCALHOST?database=mf", false},
		{"sqlserver://mf@[::1]:1433?database=mf&encrypt=disable", false},
		{`server=(local)\SQLEXPRESS;user id=mf;database=mf`, false},
		{"server=.;user id=mf;database=mf;encrypt=disable", false},
		{"sqlserver://mf@localhost?database=mf&failoverpartner=127.0.0.1", false},
	} {
		var logs strings.Builder
		s, err := Open(context.Background(), Options{URL: c.url, PoolSize: 1, Log: zerolog.New(&logs)})
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		s.Close()
		if warned := strings.Contains(logs.String(), "unencrypted"); warned != c.warn {
			t.Errorf("%s: warned %v, want %v: %q", c.url, warned, c.warn, logs.String())
		}
		if strings.Contains(logs.String(), "hunter2") || strings.Contains(logs.String(), "mf@") {
			t.Errorf("%s: the warning quotes the url: %q", c.url, logs.String())
		}
	}
}

// A store url that encrypts but verifies nothing of the server
// (TrustServerCertificate=true) is warned of as well: whoever can sit on the
// path to the database can pose as it and read every message and the
// password.
func TestAStoreURLThatDoesNotVerifyTheServerIsWarnedAbout(t *testing.T) {
	for _, c := range []struct {
		url  string
		warn bool
	}{
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=true&TrustServerCertificate=true", true},
		{"server=db.internal;user id=mf;database=mf;encrypt=true;TrustServerCertificate=true", true},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=true", false},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=strict", false},
		{"sqlserver://mf@127.0.0.1:1433?database=mf&encrypt=true&TrustServerCertificate=true", false},
		{"sqlserver://mf@db.internal:1433?database=mf&encrypt=disable", false}, // the plaintext warning's
	} {
		warning, err := CheckURL(c.url)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		if warned := strings.Contains(warning, "without verifying"); warned != c.warn {
			t.Errorf("%s: warned %v, want %v: %q", c.url, warned, c.warn, warning)
		}
	}
}
