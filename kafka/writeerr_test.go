package kafka

import (
	"context"
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// A bare deadline from the writer is the caller's only when the caller's context has
// ended; otherwise a library-set timeout (a custom Transport's) expired: a Failure.
func TestBareContextErrorIsTheCallersOnlyWhenTheirContextEnded(t *testing.T) {
	p := &Publisher{}
	d := transport.Destination{Broker: Broker, Name: "orders"}
	alive := context.Background()
	err := p.writeErr(alive, d, context.DeadlineExceeded)
	var we *WriteError
	if !errors.As(err, &we) || Classify(err) != breaker.Failure {
		t.Fatalf("writer timeout with the caller still waiting: %v, %v; want a *WriteError, Failure", err, Classify(err))
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.writeErr(ended, d, context.Canceled); err != context.Canceled || Classify(err) != breaker.Neutral {
		t.Fatalf("the caller's own cancellation: %v, %v; want it as is, Neutral", err, Classify(err))
	}
}
