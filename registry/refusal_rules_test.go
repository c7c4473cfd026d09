package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// pgRefusing is a circuit that refuses every call with err, or with the caller's
// context error when err is nil.
type pgRefusing struct{ err error }

func (c pgRefusing) Acquire(ctx context.Context) (breaker.Permit, error) {
	if c.err == nil {
		return breaker.Permit{}, ctx.Err()
	}
	return breaker.Permit{}, c.err
}
func (pgRefusing) Snapshot() breaker.Snapshot { return breaker.Snapshot{} }

func pgRefusingRegistry(t *testing.T, err error) *registry.Registry {
	t.Helper()
	return newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, Scope: breaker.SharedDependency}}),
		registry.WithCircuitFactory(breaker.SharedDependency, func(transport.Destination, breaker.Policy) (breaker.Circuit, error) {
			return pgRefusing{err}, nil
		}))
}

// A circuit's refusal is a *RejectedError naming the destination even when the
// caller's context has ended too; only the caller's own context error comes back as
// it is.
func TestRefusalAfterTheCallersContextEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := pgRefusingRegistry(t, breaker.ErrUnavailable)
	_, err := r.Acquire(ctx, orders)
	re, ok := errors.AsType[*registry.RejectedError](err)
	if !ok || re.Err != breaker.ErrUnavailable || re.Destination != orders {
		t.Fatalf("circuit refused with ErrUnavailable after a cancel: %v, want a *RejectedError", err)
	}
	if want := "registry: publish to kafka:orders rejected: " + breaker.ErrUnavailable.Error(); err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	_, err = pgRefusingRegistry(t, nil).Acquire(ctx, orders)
	if err != context.Canceled {
		t.Fatalf("circuit returned the caller's context error: %v, want it as it is", err)
	}
}

// Options given with WithBreakerOptions reach every local circuit.
func TestBreakerOptionsReachTheCircuits(t *testing.T) {
	var seen []breaker.State
	r := newRegistry(t, registry.WithBreakerOptions(breaker.WithObserver(func(tr breaker.Transition) { seen = append(seen, tr.To) })))
	pub := r.Guard(failingPublisher{errBroker}, classify)
	for range 2 {
		_ = pub.Publish(t.Context(), orders, transport.Message{})
	}
	if len(seen) != 1 || seen[0] != breaker.Open {
		t.Fatalf("observer given through WithBreakerOptions saw %v, want [open]", seen)
	}
}
