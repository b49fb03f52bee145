package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/messagefoundry/mf/storage/postgres"
)

// A store url that does not parse is refused without its password: the
// error reaches mf check's output and mf run's (the service's journal).
// pgx quotes the whole connection string in its error and masks only the
// passwords it recognises, not one written "password = ..." (libpq takes
// white space around '='), nor one after "password= ".
func TestAStoreURLThatDoesNotParseNeverShowsItsPassword(t *testing.T) {
	const secret = "S3cretPW"
	for _, url := range []string{
		"host=db.invalid password = " + secret + " sslmode=bogus",
		"host=db.invalid password= " + secret + " sslmode=bogus",
		"host=db.invalid password=" + secret + " sslmode=bogus",
		"postgres://mf:" + secret + "@db.invalid/mf?sslmode=bogus",
	} {
		_, err := postgres.CheckURL(url)
		if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "sslmode is invalid") {
			t.Errorf("CheckURL(%q): %v; want it refused saying why (sslmode is invalid), without the password", url, err)
		}
		_, err = postgres.Open(context.Background(), postgres.Options{URL: url, Log: zerolog.Nop()})
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("Open(%q): %v; want it refused without the password", url, err)
		}
	}
}
