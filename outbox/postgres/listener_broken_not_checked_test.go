package postgres_test

import (
	"context"
	"testing"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// A connection that broke while the Listener waited is replaced at once, not given a
// receive check first: one check per connection, the one after its LISTEN.
func TestListenerReplacesABrokenConnectionWithoutCheckingIt(t *testing.T) {
	pool := pgTestPool(t)
	db := &pgCheckDB{Pool: pool, sent: make(chan int, 100)}
	s := postgres.New(db)
	pids, _ := pgListenEvents(t, func(opts ...postgres.ListenerOption) (*postgres.Listener, error) {
		return s.Listener(postgres.ConnConfig(pool.Config().ConnConfig.Copy()), opts...)
	})
	first := <-pids
	if _, err := pool.Exec(context.Background(), "SELECT pg_terminate_backend($1)", first); err != nil {
		t.Fatal(err)
	}
	<-pids
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.checks != 2 {
		t.Fatalf("%d receive checks over two connections, the first killed while idle; want 2", db.checks)
	}
}
