package postgres_test

import (
	"context"
	"testing"

	"github.com/messagefoundry/mf/storage"
	"github.com/messagefoundry/mf/storage/postgres"
	"github.com/messagefoundry/mf/storage/postgres/pgtest"
	"github.com/messagefoundry/mf/storage/storagetest"
)

// opener gives each test its own schema; every handle is its own pool.
func opener(t testing.TB) func() storage.Store {
	url := pgtest.NewSchema(t)
	return func() storage.Store {
		s, err := postgres.Open(context.Background(), postgres.Options{URL: url, PoolSize: 4})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

func TestConformancePostgres(t *testing.T) { storagetest.Run(t, opener) }

func BenchmarkPostgres(b *testing.B) { storagetest.Bench(b, opener) }
