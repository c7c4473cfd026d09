package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

func Example() {
	cb, err := breaker.New("kafka:orders", breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	send := func(context.Context) error { return nil } // the call being protected

	ctx := context.Background()
	permit, err := cb.Acquire(ctx)
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	if err := send(ctx); err != nil {
		permit.Complete(breaker.Failure)
		return
	}
	permit.Complete(breaker.Success)
	fmt.Println(cb.State())
	// Output: closed
}

// A circuit opens at the threshold, rejects until the break ends, then admits one
// probe whose success closes it.
func ExampleBreaker_Acquire() {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cb, _ := breaker.New("amqp:payments", breaker.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second},
		breaker.WithClock(clock),
		breaker.WithObserver(func(t breaker.Transition) { fmt.Println(t.From, "->", t.To, "("+t.Reason+")") }))
	ctx := context.Background()
	for range 2 {
		p, _ := cb.Acquire(ctx)
		p.Complete(breaker.Failure)
	}
	_, err := cb.Acquire(ctx)
	var open *breaker.OpenError
	if errors.As(err, &open) {
		fmt.Println("rejected until", open.NotBefore.Format(time.TimeOnly))
	}
	clock.Advance(10 * time.Second)
	probe, _ := cb.Acquire(ctx)
	fmt.Println("probe:", probe.Probe())
	probe.Complete(breaker.Success)
	// Output:
	// closed -> open (failure_threshold)
	// rejected until 00:00:10
	// open -> half-open (break_elapsed)
	// probe: true
	// half-open -> closed (probe_succeeded)
}

// Complete reports whether the outcome counted: a permit admitted before the circuit
// opened is stale, and so is a second completion.
func ExamplePermit_Complete() {
	cb, _ := breaker.New("sqs:invoices", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
	ctx := context.Background()
	slow, _ := cb.Acquire(ctx)
	fast, _ := cb.Acquire(ctx)
	fmt.Println(fast.Complete(breaker.Failure)) // opens the circuit
	fmt.Println(fast.Complete(breaker.Failure)) // second completion
	fmt.Println(slow.Complete(breaker.Success)) // admitted by the closed generation
	fmt.Println(cb.State())
	// Output:
	// true
	// false
	// false
	// open
}
