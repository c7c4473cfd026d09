package mysql_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/mysql"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// An order and its event commit together; Commit wakes the dispatcher of this
// process, which publishes the event at once.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test?interpolateParams=true")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := mysql.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	store, err := mysql.New(db)
	if err != nil {
		log.Fatal(err)
	}

	orders, _ := transport.ParseDestination("kafka:orders")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (42)"); err != nil {
		log.Fatal(err)
	}
	if _, err := store.Enqueue(ctx, tx, outbox.Entry{
		Destination: orders,
		Message:     transport.Message{Key: []byte("42"), Value: []byte(`{"order":42}`)},
	}); err != nil {
		log.Fatal(err)
	}
	if err := store.Commit(tx); err != nil { // the row exists exactly when the order does
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
	if err := proc.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
