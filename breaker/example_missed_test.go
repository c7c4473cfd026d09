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
// fail with errors. With the adaptive limit on (as in DefaultPolicy), the circuit
// opens for one limit Window instead of its 30s break, and the next caller after it
// is the probe, so the circuit sees the broker answer again within about one deadline.
func ExamplePermit_CompleteMissed() {
	clock := &handClock{now: time.Unix(1_700_000_000, 0)}
	cb, err := breaker.New("amqp:orders", breaker.DefaultPolicy(), breaker.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for range 5 { // FailureThreshold
		p, err := cb.Acquire(context.Background())
		if err != nil {
			panic(err)
		}
		clock.now = clock.now.Add(500 * time.Millisecond) // the caller's deadline ends
		p.CompleteMissed(context.DeadlineExceeded)
	}
	_, err = cb.Acquire(context.Background())
	var open *breaker.OpenError
	if errors.As(err, &open) {
		fmt.Println(cb.State(), "- retry in", open.NotBefore.Sub(clock.now))
	}

	clock.now = clock.now.Add(100 * time.Millisecond) // one Window later
	probe, err := cb.Acquire(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Println("probe:", probe.Probe())
	probe.Complete(breaker.Success) // the broker answers again
	fmt.Println(cb.State())
	// Output:
	// open - retry in 100ms
	// probe: true
	// closed
}
