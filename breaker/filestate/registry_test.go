package filestate_test

import (
	"context"
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

func TestRegistryGuardsThroughFileCircuits(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.FailureThreshold = 1
	reg, err := registry.New(registry.Policy{Circuit: p}, registry.WithCircuitFactory(breaker.SingleHost, e.store().Factory()))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	pub := reg.Guard(publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error {
		calls++
		return errors.New("connection refused")
	}), nil)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	ctx := context.Background()
	if err := pub.Publish(ctx, orders, transport.Message{Value: []byte("o")}); err == nil || errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("first publish: %v, want the publisher's error", err)
	}
	if err := pub.Publish(ctx, orders, transport.Message{Value: []byte("o")}); !errors.Is(err, breaker.ErrOpen) || calls != 1 {
		t.Fatalf("second publish: %v after %d calls, want a rejection without a call", err, calls)
	}
	// Another process sees the destination's circuit open.
	rejected(t, e.circuit("kafka:orders", p))

	// A destination whose name is not a valid identity is refused, not renamed.
	bad := transport.Destination{Broker: "amqp", Name: "events/eu"}
	if _, err := reg.Circuit(bad); !errors.Is(err, filestate.ErrInvalidIdentity) {
		t.Fatalf("Circuit(%v): %v, want ErrInvalidIdentity", bad, err)
	}
}

type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}
