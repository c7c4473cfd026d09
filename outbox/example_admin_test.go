package outbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// A cron job deletes what the retention no longer keeps: published rows after a day,
// dead rows after a month.
func ExamplePurge() {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memory.New(clock)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	_, _ = store.Enqueue(ctx,
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("order 1")}},
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("order 2")}})
	proc, _ := outbox.NewProcessor(store, nil, printer{}, outbox.WithClock(clock), outbox.WithClassifier(func(error) breaker.Outcome { return breaker.Failure }))
	_, _ = proc.ProcessPending(ctx)

	r := outbox.Retention{Published: 24 * time.Hour, Dead: 30 * 24 * time.Hour}
	clock.Advance(25 * time.Hour)
	n, err := outbox.Purge(ctx, store, r, clock.Now())
	fmt.Println("deleted", n, err, "left", len(store.Records()))
	// Output:
	// publish kafka:orders order 1
	// publish kafka:orders order 2
	// deleted 2 <nil> left 0
}

// Someone on call looks at the rows that died for one destination and sends them
// again.
func ExampleDeadLetters() {
	ctx := context.Background()
	store := memory.New(nil)
	emails := transport.Destination{Broker: "kafka", Name: "emails"}
	_, _ = store.Enqueue(ctx, outbox.Entry{Destination: emails, Message: transport.Message{Value: []byte("welcome")}})
	tooLarge := func(error) breaker.Outcome { return breaker.Neutral } // the message's own fault
	proc, _ := outbox.NewProcessor(store, nil, failing{}, outbox.WithMaxAttempts(1), outbox.WithClassifier(tooLarge))
	_, _ = proc.ProcessPending(ctx)

	var dl outbox.DeadLetters = store
	dead, _ := dl.DeadRows(ctx, outbox.DeadFilter{Destination: emails}, outbox.Page{Limit: 10})
	for _, r := range dead {
		fmt.Printf("row %d %s: %s\n", r.ID, r.Status, r.LastError)
	}
	n, _ := dl.Requeue(ctx, outbox.DeadFilter{IDs: []int64{dead[0].ID}}, time.Now())
	fmt.Println("requeued", n)
	// Output:
	// row 1 dead: attempts_exhausted: message too large
	// requeued 1
}

// Someone on call asks how many rows died and why, then requeues one reason's rows
// for a destination.
func ExampleOnCall() {
	ctx := context.Background()
	store := memory.New(nil)
	emails := transport.Destination{Broker: "kafka", Name: "emails"}
	_, _ = store.Enqueue(ctx,
		outbox.Entry{Destination: emails, Message: transport.Message{Value: []byte("welcome")}},
		outbox.Entry{Destination: emails, Message: transport.Message{Value: []byte("receipt")}})
	tooLarge := func(error) breaker.Outcome { return breaker.Neutral }
	proc, _ := outbox.NewProcessor(store, nil, failing{}, outbox.WithMaxAttempts(1), outbox.WithClassifier(tooLarge))
	_, _ = proc.ProcessPending(ctx)

	var oc outbox.OnCall = store
	counts, _ := oc.DeadCounts(ctx)
	for _, c := range counts {
		fmt.Println(c.Reason, c.Rows)
	}
	// The reason picks the rows whose LastError is "attempts_exhausted: ...".
	n, _ := store.Requeue(ctx, outbox.DeadFilter{Destination: emails, Reason: outbox.ReasonAttemptsExhausted}, time.Now())
	fmt.Println("requeued", n)
	// Output:
	// attempts_exhausted 2
	// requeued 2
}

// failing refuses every message as too large.
type failing struct{}

func (failing) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return fmt.Errorf("message too large")
}
