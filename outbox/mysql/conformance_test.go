package mysql_test

import (
	"context"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
	"github.com/brokerguard/brokerguard/outbox/storetest"
)

// The conformance suite on the real server: each rule on a database of its own, rows
// committed in transactions as an application commits them.
func TestStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock breaker.Clock) storetest.Store {
		db := testDB(t)
		if err := bgmysql.Migrate(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		s, err := bgmysql.New(db, bgmysql.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Store{Store: s, Enqueue: func(ctx context.Context, entries ...outbox.Entry) ([]int64, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, err
			}
			ids, err := s.Enqueue(ctx, tx, entries...)
			if err != nil {
				_ = tx.Rollback()
				return nil, err
			}
			return ids, s.Commit(tx)
		}}
	})
}
