package postgres_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// An order and its event commit together; a dispatcher publishes the event later,
// holding the topic (not its rows) while the topic's circuit is open.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	store := postgres.New(pool)

	orders, _ := transport.ParseDestination("kafka:orders")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES (42)"); err != nil {
			return err
		}
		_, err := store.Enqueue(ctx, postgres.Pgx(tx), outbox.Entry{
			Destination: orders,
			Message:     transport.Message{Key: []byte("42"), Value: []byte(`{"order":42}`)},
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	var kafkaPublisher transport.Publisher // e.g. the kafka adapter's publisher
	proc, err := outbox.NewProcessor(store, reg, reg.Guard(kafkaPublisher, nil))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := proc.Run(ctx); err != nil { // until ctx ends; no row stays leased
		log.Fatal(err)
	}
}
