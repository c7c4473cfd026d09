package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// pgTestDSN is the server the package's own tests use: DATABASE_URL, else the
// machine's server with trust authentication.
func pgTestDSN() string {
	if dsn := os.Getenv("DATABASE_URL"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// pgTestStore returns a Store on a migrated table in a schema of its own, dropped
// when the test ends. It skips the test in one line when the server cannot be
// reached, unless CI=true.
func pgTestStore(t *testing.T, opts ...postgres.Option) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgTestPool(t)
	if err := postgres.Migrate(context.Background(), pool, opts...); err != nil {
		t.Fatal(err)
	}
	return postgres.New(pool, opts...), pool
}

// pgTestPool returns a pool whose search_path is a schema of its own (see
// pgTestStore), with no table yet.
func pgTestPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgTestDSN())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is required under CI=true: %v", err)
		}
		t.Skipf("PostgreSQL unreachable at DATABASE_URL: %v", err)
	}
	defer admin.Close(ctx)
	schema := fmt.Sprintf("pgown_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgTestDSN())
		if err == nil {
			_, err = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(pgTestDSN())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// pgDeadRows enqueues n rows for d and makes them dead with reason.
func pgDeadRows(t *testing.T, s *postgres.Store, pool *pgxpool.Pool, d transport.Destination, n int, reason string) []int64 {
	t.Helper()
	ctx := context.Background()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: d, Message: transport.Message{Key: fmt.Appendf(nil, "k%d", i)}}
	}
	var ids []int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		ids, err = s.Enqueue(ctx, postgres.Pgx(tx), entries...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	token := fmt.Sprintf("pgdead-%s-%d", d.Name, n)
	claimed, err := s.Claim(ctx, outbox.ClaimRequest{Token: token, Now: now, Limit: n, Lease: time.Minute, ProbeLimit: 1})
	if err != nil || len(claimed) != n {
		t.Fatalf("Claim = %d of %d rows, %v", len(claimed), n, err)
	}
	failures := make([]outbox.Failure, n)
	for i, id := range ids {
		failures[i] = outbox.Failure{ID: id, RetryAt: now, Dead: true, Err: reason}
	}
	if _, dead, err := s.Fail(ctx, token, failures); dead != n || err != nil {
		t.Fatalf("Fail = %d dead of %d, %v", dead, n, err)
	}
	return ids
}

// An empty, non-nil IDs list restricts nothing, as DeadFilter says (IDs limit the
// filter only when not empty): the other fields alone select the dead rows.
func TestDeadFilterWithEmptyIDsSelectsByTheOtherFields(t *testing.T) {
	s, pool := pgTestStore(t)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	refunds := transport.Destination{Broker: "kafka", Name: "refunds"}
	want := pgDeadRows(t, s, pool, orders, 3, outbox.ReasonAttemptsExhausted)
	pgDeadRows(t, s, pool, refunds, 2, outbox.ReasonAttemptsExhausted)
	ctx := context.Background()
	for _, f := range []outbox.DeadFilter{
		{IDs: []int64{}, Destination: orders},
		{IDs: []int64{}, Destination: orders, Reason: outbox.ReasonAttemptsExhausted},
	} {
		recs, err := s.DeadRows(ctx, f, outbox.Page{Limit: 10})
		if err != nil || len(recs) != len(want) {
			t.Fatalf("DeadRows(%+v) = %d rows, %v; want %d", f, len(recs), err, len(want))
		}
		sums, err := s.DeadSummaries(ctx, f, outbox.Page{Limit: 10})
		if err != nil || len(sums) != len(want) {
			t.Fatalf("DeadSummaries(%+v) = %d rows, %v; want %d", f, len(sums), err, len(want))
		}
	}
	n, err := s.Requeue(ctx, outbox.DeadFilter{IDs: []int64{}, Destination: refunds}, time.Now())
	if err != nil || n != 2 {
		t.Fatalf("Requeue with empty IDs = %d, %v; want refunds' 2 rows", n, err)
	}
}

// Requeue goes on past its internal batch: every matching dead row is requeued and
// counted, whether their number is a multiple of the batch or not.
func TestRequeueBeyondOneBatch(t *testing.T) {
	s, pool := pgTestStore(t)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	refunds := transport.Destination{Broker: "kafka", Name: "refunds"}
	pgDeadRows(t, s, pool, orders, 2000, outbox.ReasonAttemptsExhausted)
	pgDeadRows(t, s, pool, refunds, 1001, outbox.ReasonAttemptsExhausted)
	ctx := context.Background()
	for _, tc := range []struct {
		d    transport.Destination
		want int
	}{{orders, 2000}, {refunds, 1001}} {
		n, err := s.Requeue(ctx, outbox.DeadFilter{Destination: tc.d}, time.Now())
		if err != nil || n != tc.want {
			t.Fatalf("Requeue(%s) = %d, %v; want %d", tc.d, n, err, tc.want)
		}
		if left, err := s.DeadRows(ctx, outbox.DeadFilter{Destination: tc.d}, outbox.Page{Limit: 1}); err != nil || len(left) != 0 {
			t.Fatalf("after Requeue(%s): %d dead rows left, %v", tc.d, len(left), err)
		}
	}
}
