package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// An Enqueue through database/sql that fails while it reads the new rows' ids (here
// a table made by another program, whose ids are not numbers) returns the error and
// gives the connection back: it closes its rows, which would otherwise keep the
// connection (and, in a transaction, block its Commit and Rollback) for good.
func TestEnqueueThroughSQLThatFailsReadingTheIDsGivesTheConnectionBack(t *testing.T) {
	pool := pgTestPool(t)
	ctx := context.Background()
	tbl, err := postgres.NewTableName("", "mp_text_ids")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE mp_text_ids (id text NOT NULL DEFAULT 'not-a-number',
		destination text, msg_key bytea, payload bytea, headers jsonb, created_at timestamptz, visible_after timestamptz)`); err != nil {
		t.Fatal(err)
	}
	s := postgres.New(pool, postgres.WithTable(tbl))
	// Connections of its own, not the pool's: a connection kept by the rows must not
	// keep the pool's Close waiting.
	db := stdlib.OpenDB(*pool.Config().ConnConfig.Copy())
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	ids, err := s.Enqueue(ctx, postgres.SQL(db), outbox.Entry{Destination: d}, outbox.Entry{Destination: d})
	if err == nil || ids != nil {
		t.Fatalf("Enqueue into a table of text ids: %v, %v; want the error reading them", ids, err)
	}
	if inUse := db.Stats().InUse; inUse != 0 {
		t.Fatalf("%d connections still in use after Enqueue returned, want 0", inUse)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}
