package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// A call that reads rows back (Fail's UPDATE ... RETURNING) and runs out of time
// while the server waits (here for a row lock another transaction holds) fails with
// the deadline and resets the pool: its idle connections, which may all sit on a
// path that went silent, are closed.
func TestACallWhoseRowsRanOutOfTimeResetsThePool(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx := context.Background()
	now := time.Now().Add(time.Minute) // after the row's enqueue time
	id := mpClaimOne(t, s, pool, "mptok", now)
	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	if _, err := locker.Exec(ctx, "SELECT 1 FROM "+postgres.Table+" WHERE id = $1 FOR UPDATE", id); err != nil {
		t.Fatal(err)
	}
	// Two idle connections beside the locker's.
	c1, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c1.Release()
	c2.Release()
	if idle := pool.Stat().IdleConns(); idle != 2 {
		t.Fatalf("%d idle connections before the call, want 2", idle)
	}
	short := postgres.New(pool, postgres.WithTimeout(300*time.Millisecond))
	_, _, err = short.Fail(ctx, "mptok", []outbox.Failure{{ID: id, RetryAt: now, Err: "x"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fail on a locked row: %v, want the deadline", err)
	}
	if idle := pool.Stat().IdleConns(); idle != 0 {
		t.Fatalf("%d idle connections after a call ran out of time, want 0 (the pool reset)", idle)
	}
}

// mpClaimOne commits one row for kafka:orders and claims it with token at now (which
// must not be before the commit), for a lease of an hour; it returns the row's id.
func mpClaimOne(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, token string, now time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		ids, err = s.Enqueue(ctx, postgres.Pgx(tx), outbox.Entry{Destination: transport.Destination{Broker: "kafka", Name: "orders"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: token, Now: now, Limit: 1, Lease: time.Hour, ProbeLimit: 1}); err != nil || len(recs) != 1 {
		t.Fatalf("Claim = %d rows, %v", len(recs), err)
	}
	return ids[0]
}
