package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

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
