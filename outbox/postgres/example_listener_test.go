package postgres_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// A Processor woken by the NOTIFY each enqueueing commit sends publishes within
// milliseconds; polling stays on as the safety net. A Store on a pgxpool.Pool gives
// the Processor such a Listener by itself (CommitWaker); give one explicitly, as
// here, when the pool reaches PostgreSQL through a pooler in transaction mode and the
// Listener must not.
func ExampleStore_Listener() {
	ctx := context.Background()
	dsn := "postgres://postgres@127.0.0.1:5432/test"
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store := postgres.New(pool)
	// A connection of its own, straight to PostgreSQL: a LISTEN does not survive a
	// transaction-mode pooler.
	listener, err := store.Listener(postgres.ConnString(dsn), postgres.WithListenErrors(func(err error) { log.Print(err) }))
	if err != nil {
		log.Fatal(err)
	}
	var pub transport.Publisher // e.g. a registry-guarded Kafka publisher
	proc, err := outbox.NewProcessor(store, nil, pub, outbox.WithWaker(listener))
	if err != nil {
		log.Fatal(err)
	}
	if err := proc.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
