package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// ConnString hands the listen function a connection made from the string; a string
// that does not parse is the error of every attempt, and listen is not called.
func TestConnStringConnectsOrReturnsTheParseError(t *testing.T) {
	ctx := context.Background()
	pool := pgTestPool(t)
	var pid uint32
	if err := postgres.ConnString(pool.Config().ConnString())(ctx, func(c *pgx.Conn) error { pid = c.PgConn().PID(); return nil }); err != nil || pid == 0 {
		t.Fatalf("ConnString of the test server: %v (pid %d), want a connection", err, pid)
	}
	bad := postgres.ConnString("postgres://%zz")
	for range 2 {
		called := false
		if err := bad(ctx, func(*pgx.Conn) error { called = true; return nil }); err == nil || called {
			t.Fatalf("ConnString of a string that does not parse: %v (listen called: %v), want the parse error", err, called)
		}
	}
}
