package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// pgOpenEnqueue enqueues one row in a transaction it leaves open (a business
// transaction that has not committed yet), rolled back when the test ends.
func pgOpenEnqueue(ctx context.Context, t *testing.T, s *postgres.Store, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if err := pgEnqueueIn(ctx, s, tx); err != nil {
		t.Fatal(err)
	}
	return tx
}

func pgEnqueueIn(ctx context.Context, s *postgres.Store, tx pgx.Tx) error {
	e := outbox.Entry{Destination: transport.Destination{Broker: "kafka", Name: "orders"}, Message: transport.Message{Value: []byte("v")}}
	_, err := s.Enqueue(ctx, postgres.Pgx(tx), e)
	return err
}

// pgRelationLocks returns the modes of the locks tx holds on relations other than the
// catalogs' (the outbox's tables and indexes among them).
func pgRelationLocks(t *testing.T, tx pgx.Tx) []string {
	t.Helper()
	rows, err := tx.Query(context.Background(), `SELECT c.relname || ' ' || l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND c.relnamespace <> 'pg_catalog'::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	locks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return locks
}

// Migrate on a current schema, run while a business transaction that enqueued is
// still open, reads the schema's version and takes no lock on the outbox's tables:
// it finishes, and an Enqueue after it commits, while that transaction stays open
// (before, Migrate queued an exclusive lock behind it, and every Enqueue behind that).
func TestMigrateOnACurrentSchemaLocksNothing(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a wait fails the test, not hangs it
	defer cancel()
	open := pgOpenEnqueue(ctx, t, s, pool)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := postgres.Migrate(ctx, tx); err != nil {
		t.Fatalf("Migrate on a current schema beside an open transaction: %v", err)
	}
	if locks := pgRelationLocks(t, tx); len(locks) != 0 {
		t.Errorf("Migrate on a current schema holds %v", locks)
	}
	if err := pgEnqueueIn(ctx, s, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("an Enqueue after Migrate, beside the open transaction: %v", err)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// Migrate over a schema that is not current waits for the table behind an open
// business transaction, but gives its place up at each MigrateLockTimeout: the
// Enqueues of other transactions commit meanwhile (before, each waited behind the
// migration's queued exclusive lock until the open transaction ended); once the open
// transaction commits, the migration goes through and marks the schema current.
func TestMigrateBehindAnOpenTransactionLetsEnqueuesThrough(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "COMMENT ON TABLE "+postgres.Table+" IS NULL"); err != nil { // as version 4 left it
		t.Fatal(err)
	}
	open := pgOpenEnqueue(ctx, t, s, pool)
	migrated := make(chan error, 1)
	go func() { migrated <- postgres.Migrate(ctx, pool) }()
	for i := range 3 {
		// Once the migration's lock request waits in the table's queue, an Enqueue
		// queues behind it; it must get through while the open transaction lasts.
		for queued := 0; queued == 0; {
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
				WHERE NOT granted AND relation = '`+postgres.Table+`'::regclass`).Scan(&queued); err != nil {
				t.Fatalf("waiting for the migration's lock request: %v", err)
			}
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pgEnqueueIn(ctx, s, tx) })
		if err != nil {
			t.Fatalf("Enqueue %d behind a waiting migration: %v", i, err)
		}
		select {
		case err := <-migrated:
			t.Fatalf("Migrate returned %v while a transaction holding the table was open", err)
		default:
		}
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-migrated; err != nil {
		t.Fatalf("Migrate after the open transaction committed: %v", err)
	}
	var mark string
	if err := pool.QueryRow(ctx, "SELECT obj_description('"+postgres.Table+"'::regclass, 'pg_class')").Scan(&mark); err != nil || mark != "brokerguard outbox schema 5" {
		t.Fatalf("the table's mark after Migrate: %q, %v", mark, err)
	}
}

// pgEnqueue commits entries in a transaction of their own and returns their ids.
func pgEnqueue(ctx context.Context, t *testing.T, s *postgres.Store, pool *pgxpool.Pool, entries ...outbox.Entry) []int64 {
	t.Helper()
	var ids []int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		ids, err = s.Enqueue(ctx, postgres.Pgx(tx), entries...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
