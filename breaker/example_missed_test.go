package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

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
	noJitter := func() float64 { return 0.5 }
	cb, err := breaker.New("amqp:orders", breaker.DefaultPolicy(), breaker.WithClock(clock), breaker.WithRandom(noJitter))
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
