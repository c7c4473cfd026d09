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

// mpCommitBeforeCheckDB is a Store's DB on a pool that, before each receive check's
// NOTIFY, commits a NOTIFY like Enqueue's (an empty payload) on the same channel, so
// that the Listener receives a commit's notification while it waits for its check.
type mpCommitBeforeCheckDB struct{ *pgxpool.Pool }

func (db mpCommitBeforeCheckDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(args) != 2 || !strings.Contains(sql, "pg_notify") {
		return db.Pool.Exec(ctx, sql, args...)
	}
	if p, _ := args[1].(string); strings.HasPrefix(p, "brokerguard-check:") {
		if _, err := db.Pool.Exec(ctx, "SELECT pg_notify($1, '')", args[0]); err != nil {
			return pgconn.CommandTag{}, err
		}
	}
	return db.Pool.Exec(ctx, sql, args...)
}

// A commit's notification that arrives while the Listener waits for its own check
// wakes the Processor there and then: the check does not swallow it.
func TestListenerCheckPassesOnACommitsNotification(t *testing.T) {
	pool := pgTestPool(t)
	s := postgres.New(mpCommitBeforeCheckDB{pool})
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
