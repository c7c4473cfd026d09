package outbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// storeCase is one Store under test, with what a test needs around it.
type storeCase struct {
	store outbox.Store
	env   *env // the PostgreSQL table and the kfake cluster (also used by the memory case, for Kafka)
	// enqueue commits entries and returns their ids; tryEnqueue returns the error.
	enqueue    func(t testing.TB, entries ...outbox.Entry) []int64
	tryEnqueue func(entries ...outbox.Entry) ([]int64, error)
	get        func(t testing.TB, id int64) outbox.Record
	// pg is set for the PostgreSQL case.
	pg bool
}

// onBothStores runs test against the memory store and the PostgreSQL store, each on
// a fresh table, a fresh kfake cluster and the clock test gets.
func onBothStores(t *testing.T, test func(t *testing.T, clock *fakeclock.Clock, sc storeCase)) {
	t.Run("memory", func(t *testing.T) {
		clock := fakeclock.New(start())
		e := newEnv(t, clock)
		mem := outbox.NewMemoryStore(clock)
		test(t, clock, storeCase{
			store: mem, env: e,
			tryEnqueue: func(entries ...outbox.Entry) ([]int64, error) { return mem.Enqueue(context.Background(), entries...) },
			enqueue: func(t testing.TB, entries ...outbox.Entry) []int64 {
				t.Helper()
				ids, err := mem.Enqueue(context.Background(), entries...)
				if err != nil {
					t.Fatal(err)
				}
				return ids
			},
			get: func(t testing.TB, id int64) outbox.Record {
				t.Helper()
				r, ok := mem.Get(id)
				if !ok {
					t.Fatalf("row %d not found", id)
				}
				return r
			},
		})
	})
	t.Run("postgres", func(t *testing.T) {
		clock := fakeclock.New(start())
		e := newEnv(t, clock)
		test(t, clock, storeCase{
			store: e.store, env: e, pg: true,
			enqueue: e.commit,
			tryEnqueue: func(entries ...outbox.Entry) (ids []int64, err error) {
				ctx := context.Background()
				err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
					ids, err = e.store.Enqueue(ctx, postgres.Pgx(tx), entries...)
					return err
				})
				return ids, err
			},
			get: e.get,
		})
	})
}
