package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// callsOf returns the call counts of d's live circuit.
func callsOf(t *testing.T, r *registry.Registry, d transport.Destination) registry.CallCounts {
	t.Helper()
	for _, c := range r.Report() {
		if c.Destination == d {
			return c.Calls
		}
	}
	t.Fatalf("%s has no live circuit", d)
	return registry.CallCounts{}
}

// The counts say what the circuit made of each call: a failure it ignored is not a
// failure, a refusal is a rejection, probes are counted by result too.
func TestCallCountsAgreeWithTheCircuit(t *testing.T) {
	clock := fakeclock.New(t0)
	shadow := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, Mode: breaker.Shadow}
	r := newRegistry(t, registry.WithClock(clock), registry.WithCallCounts(), registry.WithOverride("kafka:shadowed", registry.Policy{Circuit: shadow}))
	var result error
	g := r.Guard(&fakePublisher{fn: func(context.Context, transport.Destination) error { return result }}, classify)
	ctx := context.Background()
	publish := func(d transport.Destination, err error) error {
		result = err
		return g.Publish(ctx, d, transport.Message{})
	}

	publish(orders, nil)
	publish(orders, errBadMsg)
	publish(orders, errBroker)
	publish(orders, errBroker) // opens (threshold 2)
	publish(orders, nil)       // rejected
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	g.Publish(cancelled, orders, transport.Message{}) // ended before a permit: neutral
	want := registry.CallCounts{Published: 1, Failed: 2, Rejected: 1, Neutral: 2}
	if got := callsOf(t, r, orders); got != want {
		t.Fatalf("before the probe: %+v, want %+v", got, want)
	}

	clock.Advance(time.Minute)
	publish(orders, errBroker) // a failed probe
	clock.Advance(2 * time.Minute)
	publish(orders, nil) // a successful probe closes
	want.Failed, want.Published, want.ProbesFailed, want.ProbesPublished = 3, 2, 1, 1
	if got := callsOf(t, r, orders); got != want {
		t.Fatalf("after the probes: %+v, want %+v", got, want)
	}

	c, _ := r.Circuit(orders)
	c.(*breaker.Breaker).ForceClose(clock.Now().Add(time.Hour))
	publish(orders, errBroker) // ignored under ForceClose
	want.Neutral++
	if got := callsOf(t, r, orders); got != want {
		t.Fatalf("under ForceClose: %+v, want %+v", got, want)
	}

	shadowed := transport.Destination{Broker: "kafka", Name: "shadowed"}
	publish(shadowed, errBroker) // opens the shadow circuit
	publish(shadowed, errBroker) // a would-reject: admitted, its outcome ignored
	if got, want := callsOf(t, r, shadowed), (registry.CallCounts{Failed: 1, Neutral: 1}); got != want {
		t.Fatalf("shadow: %+v, want %+v", got, want)
	}
	if got := callsOf(t, r, shadowed).Total(); got != 2 {
		t.Fatalf("shadow total %d, want 2", got)
	}
}

// Without WithCallCounts nothing is counted, and Complete still completes.
func TestCallCountsOff(t *testing.T) {
	r := newRegistry(t)
	g := r.Guard(&fakePublisher{fn: func(context.Context, transport.Destination) error { return errBroker }}, classify)
	g.Publish(context.Background(), orders, transport.Message{})
	if got := callsOf(t, r, orders); got != (registry.CallCounts{}) || r.CountsCalls() {
		t.Fatalf("counts without WithCallCounts: %+v", got)
	}
	p, err := r.Acquire(context.Background(), orders)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Complete(orders, p, breaker.Failure) || r.Snapshots()[orders].State != breaker.Open {
		t.Fatalf("Complete did not complete: %+v", r.Snapshots()[orders])
	}
}

// Publishers that complete their own permits count through Registry.Complete.
func TestCallCountsThroughComplete(t *testing.T) {
	r := newRegistry(t, registry.WithCallCounts())
	ctx := context.Background()
	for _, o := range []breaker.Outcome{breaker.Success, breaker.Failure, breaker.Failure} {
		p, err := r.Acquire(ctx, orders)
		if err != nil {
			t.Fatal(err)
		}
		r.Complete(orders, p, o)
	}
	if _, err := r.Acquire(ctx, orders); err == nil {
		t.Fatal("the open circuit admitted a call")
	}
	if got, want := callsOf(t, r, orders), (registry.CallCounts{Published: 1, Failed: 2, Rejected: 1}); got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
}
