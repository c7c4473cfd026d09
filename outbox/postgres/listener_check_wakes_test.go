package postgres_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// mpOnCheckDB is a Store's DB on a pool that runs onCheck instead of sending a
// receive check's NOTIFY (channel, payload); other statements go to the pool.
type mpOnCheckDB struct {
	*pgxpool.Pool
	onCheck func(ctx context.Context, channel, payload string) error
}

func (db mpOnCheckDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(args) == 2 && strings.Contains(sql, "pg_notify") {
		channel, _ := args[0].(string)
		if p, _ := args[1].(string); strings.HasPrefix(p, "brokerguard-check:") {
			return pgconn.CommandTag{}, db.onCheck(ctx, channel, p)
		}
	}
	return db.Pool.Exec(ctx, sql, args...)
}

// A commit's notification that arrives while the Listener waits for its own check
// wakes the Processor there and then: the check does not swallow it.
func TestListenerCheckPassesOnACommitsNotification(t *testing.T) {
	pool := pgTestPool(t)
	// Before each check's NOTIFY, a commit's (an empty payload) on the same channel.
	s := postgres.New(mpOnCheckDB{pool, func(ctx context.Context, channel, payload string) error {
		if _, err := pool.Exec(ctx, "SELECT pg_notify($1, '')", channel); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, "SELECT pg_notify($1, $2)", channel, payload)
		return err
	}})
	var wakes atomic.Int64
	wokenBeforeListening := make(chan int64, 1)
	l, err := s.Listener(postgres.ConnConfig(pool.Config().ConnConfig.Copy()),
		postgres.WithOnListen(func(uint32) {
			select {
			case wokenBeforeListening <- wakes.Load():
			default:
			}
		}),
		postgres.WithListenErrors(func(err error) { t.Errorf("listen: %v", err) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Listen(ctx, func() { wakes.Add(1) }) }()
	n := <-wokenBeforeListening
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Listen: %v", err)
	}
	if n != 1 {
		t.Fatalf("woken %d times during the first check, with one commit's notification in it; want 1", n)
	}
}
