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

// Start from the recommended policy and change what a destination needs.
func ExampleDefaultPolicy() {
	p := breaker.DefaultPolicy()
	fmt.Println(p.FailureThreshold, p.BreakDuration, p.ProbeLease, p.MaxBreakDuration, p.Jitter)

	payments := breaker.DefaultPolicy()
	payments.FailureThreshold = 2 // open sooner
	fmt.Println(payments.Validate() == nil)

	// A circuit that never opens must say so: registry.New refuses the zero Policy.
	fmt.Println(breaker.DisabledPolicy().Disabled, breaker.Policy{}.Disabled)
	// Output:
	// 5 550ms 10s 0s 0.1
	// true
	// true false
}

// A failure completed with its error tells people on call why the circuit opened and
// since when; credentials in the text are taken out.
func ExamplePermit_CompleteWith() {
	cb, err := breaker.New("kafka:orders", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
	if err != nil {
		panic(err)
	}
	p, err := cb.Acquire(context.Background())
	if err != nil {
		panic(err)
	}
	p.CompleteWith(breaker.Failure, errors.New("kafka: LEADER_NOT_AVAILABLE from sasl://svc:secret@broker-1:9092"))
	s := cb.Snapshot()
	fmt.Println(s.State, "-", s.LastError)
	fmt.Println("unhealthy since set:", !s.UnhealthySince.IsZero())
	// Output:
	// open - kafka: LEADER_NOT_AVAILABLE from sasl://[redacted]@broker-1:9092
	// unhealthy since set: true
}

// handClock is a clock the example moves by hand.
type handClock struct{ now time.Time }

func (c *handClock) Now() time.Time { return c.now }

// A broker that stops answering in time: its calls miss their deadlines rather than
// fail with errors. The circuit opens for its break; a probe that then waits out its
// caller's 1s deadline is followed by the next probe a tenth of a break later, so a
// hung broker carries one call at a time and the circuit sees it answer again as soon
// as it does.
func ExamplePermit_CompleteMissed() {
	clock := &handClock{now: time.Unix(1_700_000_000, 0)}
	policy := breaker.DefaultPolicy()
	policy.Jitter = 0 // exact times for the output below
	cb, err := breaker.New("amqp:orders", policy, breaker.WithClock(clock))
	if err != nil {
		panic(err)
	}
	retryIn := func() time.Duration {
		_, err := cb.Acquire(context.Background())
		var open *breaker.OpenError
		if !errors.As(err, &open) {
			panic(err)
		}
		return open.NotBefore.Sub(clock.now)
	}
	for range 5 { // FailureThreshold
		p, err := cb.Acquire(context.Background())
		if err != nil {
			panic(err)
		}
		clock.now = clock.now.Add(time.Second) // the caller's deadline ends
		p.CompleteMissed(context.DeadlineExceeded)
	}
	fmt.Println(cb.State(), "- retry in", retryIn())

	clock.now = clock.now.Add(550 * time.Millisecond)
	probe, _ := cb.Acquire(context.Background())
	clock.now = clock.now.Add(time.Second)
	probe.CompleteMissed(context.DeadlineExceeded)
	fmt.Println("probe missed - retry in", retryIn())

	clock.now = clock.now.Add(55 * time.Millisecond)
	probe, _ = cb.Acquire(context.Background())
	probe.Complete(breaker.Success) // the broker answers again
	fmt.Println(cb.State())
	// Output:
	// open - retry in 550ms
	// probe missed - retry in 55ms
	// closed
}
