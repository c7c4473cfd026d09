package outbox_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// TestClaimsOfAnotherTableDoNotWait: two outboxes of the same name in two schemas of
// one database, each found through its own search_path, take turns only with their
// own claims. A claim of one, stuck behind a lock on its table while it holds its
// claims' lock, does not hold up the other's claims (with one lock for both, the
// other's claim waited until its lock_timeout).
func TestClaimsOfAnotherTableDoNotWait(t *testing.T) {
	ctx := context.Background()
	dsnA := harness.PostgresSchema(t)
	u, err := url.Parse(dsnA)
	if err != nil || u.Query().Get("search_path") == "" {
		t.Fatalf("the harness's DSN %q has no search_path to change: %v", dsnA, err)
	}
	schemaA := u.Query().Get("search_path")
	schemaB := schemaA + "_b"
	setup := newPool(t, dsnA, nil) // also holds the lock on A's table
	if _, err := setup.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schemaB}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := setup.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schemaB}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	withPath := func(schema string) string {
		q := u.Query()
		q.Set("search_path", schema)
		q.Set("pool_max_conns", "1") // the claim after the first runs on the same connection
		v := *u
		v.RawQuery = q.Encode()
		return v.String()
	}
	poolA, poolB := newPool(t, withPath(schemaA), nil), newPool(t, withPath(schemaB), nil)
	for _, p := range []*pgxpool.Pool{poolA, poolB} {
		if err := postgres.Migrate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	storeA := postgres.New(poolA)
	storeB := postgres.New(poolB, postgres.WithTimeout(2*time.Second))
	enqueueRows(t, poolB, storeB, 1)
	claim := func(s *postgres.Store, token string) ([]outbox.Record, error) {
		return s.Claim(ctx, outbox.ClaimRequest{Token: token, Now: time.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
	}
	// A first claim prepares A's statements, so that the next one takes the claims'
	// lock before it needs its table.
	if _, err := claim(storeA, "a1"); err != nil {
		t.Fatal(err)
	}
	tx, err := setup.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{schemaA, postgres.Table}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() { _, err := claim(storeA, "a2"); stuck <- err }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		err := setup.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relname = $1 AND c.relnamespace = $2::regnamespace`, postgres.Table, schemaA).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's claim never waited for its table")
		}
	}
	recs, err := claim(storeB, "b1")
	if err != nil || len(recs) != 1 {
		t.Fatalf("B's claim while A's waits: %d rows, %v; want its 1 row", len(recs), err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stuck; err != nil {
		t.Errorf("A's claim after the lock: %v", err)
	}
}
