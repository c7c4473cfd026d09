package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// A memory store takes rows as an application's transaction would and reports its
// backlog on the clock it was given, as a database store does.
func ExampleNew() {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	store := memory.New(clock)

	orders, _ := transport.ParseDestination("kafka:orders")
	ids, _ := store.Enqueue(ctx,
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("order 1")}},
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("order 2")}})
	clock.Advance(time.Minute)

	pending, oldest, _ := store.Backlog(ctx)
	fmt.Println(ids, pending, oldest)
	// Output:
	// [1 2] 2 1m0s
}
