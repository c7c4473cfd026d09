package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// WithTimeout(0) gives the Store no bound of its own: a claim keeps the server's
// lock_timeout (a role's or a connection's setting) rather than turning it off.
func TestClaimWithoutATimeoutKeepsTheServersLockTimeout(t *testing.T) {
	_, pool := pgTestStore(t)
	ctx := context.Background()
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "200"
	cfg.MaxConns = 1 // the second claim runs on the connection that prepared the first
	bounded, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bounded.Close()
	s := postgres.New(bounded, postgres.WithTimeout(0))
	claim := func(ctx context.Context) error {
		_, err := s.Claim(ctx, outbox.ClaimRequest{Token: "mplock", Now: time.Now(), Limit: 1, Lease: time.Minute, ProbeLimit: 1})
		return err
	}
	// Prepared now, the claim's statements take the table's lock when they run, after
	// the claim's own settings, not when they are parsed.
	if err := claim(ctx); err != nil {
		t.Fatal(err)
	}

	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	if _, err := locker.Exec(ctx, "LOCK TABLE "+postgres.Table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// Only a bound for a broken build, which would wait for the lock for good.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = claim(cctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("a claim on a locked table: %v; want the server's lock_timeout (55P03)", err)
	}
}
