package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/outbox/storetest"
)

// The package proves its Store with the conformance suite itself, so that an edit of
// it is checked by its own tests (the memory store's run is outbox's own; this is the
// only run on PostgreSQL): each rule on a table of its own, rows committed in
// transactions as an application commits them.
func TestStoreConformanceOwn(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock breaker.Clock) storetest.Store {
		pool := pgTestPool(t)
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
