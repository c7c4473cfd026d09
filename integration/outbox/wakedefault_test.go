package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// TestProcessorWakesOnCommitByDefault: a Processor on a Store made from a pool,
// given no Waker, publishes a committed row long before its poll interval (an hour
// here); made WithoutNotify, the Store gives no Waker and the row waits.
func TestProcessorWakesOnCommitByDefault(t *testing.T) {
	dsn := harness.PostgresSchema(t)
	db := newPool(t, dsn, nil)
	if err := postgres.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	if w := postgres.New(db, postgres.WithoutNotify()).CommitWaker(); w != nil {
		t.Errorf("a Store made WithoutNotify gives a Waker: %T", w)
	}
	// A table of its own, so that its channel (and LISTEN) are the test's alone.
	tbl, err := postgres.NewTableName("", randomName("outbox_"))
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(context.Background(), db, postgres.WithTable(tbl)); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(db, postgres.WithTable(tbl))
	pub := newCounting(nopPublisher{})
	runRelays(t, 1, store, pub, nil, outbox.WithPollInterval(time.Hour))
	waitFor(t, "the Store's Listener to listen", 10*time.Second, func() bool {
		var n int
		err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
			"LISTEN "+pgx.Identifier{tbl.Channel()}.Sanitize()).Scan(&n)
		return err == nil && n == 1
	})
	committed := time.Now()
	ids := enqueueRows(t, db, store, 1)
	done := waitPublished(t, pub, ids, waitTimeout) // the poll interval is an hour: no need for a tight bound
	t.Logf("published %v after the commit, poll interval 1h", done.Sub(committed).Round(time.Millisecond))
}

// waitFor polls cond until it holds or within passes (then the test fails).
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
	}
}
