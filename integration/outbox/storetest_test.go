package outbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/outbox/storetest"
)

// The PostgreSQL store passes the suite the memory store passes (outbox's own test),
// each rule on a table of its own, rows committed in transactions as an application
// commits them.
func TestPostgresStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock breaker.Clock) storetest.Store {
		pool := newPool(t, harness.PostgresSchema(t), nil)
		if err := postgres.Migrate(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
		s := postgres.New(pool, postgres.WithClock(clock))
		return storetest.Store{Store: s, Enqueue: func(ctx context.Context, entries ...outbox.Entry) (ids []int64, err error) {
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				ids, err = s.Enqueue(ctx, postgres.Pgx(tx), entries...)
				return err
			})
			return ids, err
		}}
	})
}
