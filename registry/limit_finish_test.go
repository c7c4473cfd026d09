package registry_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// AcquireN weighs a call by its messages under an adaptive limit (at least one), and
// Finish completes the permit with Outcome, giving the slot back: a nil classifier
// counts every error as a Failure, a given one is asked.
func TestAcquireNWeighsAndFinishClassifies(t *testing.T) {
	r := newRegistry(t, registry.WithCallCounts(),
		registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, Admission: admission.Policy{Limit: admission.LimitPolicy{Max: 10}}}))
	ctx := t.Context()
	big, err := r.AcquireN(ctx, orders, 9)
	if err != nil {
		t.Fatalf("AcquireN(9) under a limit of 10: %v", err)
	}
	zero, err := r.AcquireN(ctx, orders, 0) // weighs one message
	if err != nil {
		t.Fatalf("AcquireN(0) beside 9 of 10: %v", err)
	}
	if _, err := r.AcquireN(ctx, orders, 1); !errors.Is(err, admission.ErrOverLimit) {
		t.Fatalf("AcquireN(1) beside 10 of 10: %v, want ErrOverLimit", err)
	} else if re, ok := errors.AsType[*registry.RejectedError](err); !ok || re.Destination != orders {
		t.Fatalf("refusal %v is not a *RejectedError for %s", err, orders)
	}
	s := r.Start(ctx, orders)
	if o := r.Finish(ctx, orders, big, s, errBadMsg, 9, classify); o != breaker.Neutral {
		t.Fatalf("Finish with a classifier that says Neutral: %v", o)
	}
	if o := r.Finish(ctx, orders, zero, s, errBadMsg, 0, nil); o != breaker.Failure {
		t.Fatalf("Finish without a classifier: %v, want Failure", o)
	}
	if c := callsOf(t, r, orders); c.Neutral != 1 || c.Failed != 1 || c.Rejected != 1 {
		t.Fatalf("counts %+v, want one neutral, one failed, one rejected", c)
	}
	if snap, lim := r.Snapshots()[orders], limitOf(t, r, orders); snap.Failures != 1 || lim.InFlight != 0 {
		t.Fatalf("after both finished: %d failures, %d in flight under the limit; want 1 and 0", snap.Failures, lim.InFlight)
	}
}

// AcquireN for a destination the registry refuses returns the registry's error.
func TestAcquireNOfARefusedDestination(t *testing.T) {
	r := newRegistry(t, registry.WithMaxDestinations(1))
	if _, err := r.AcquireN(t.Context(), orders, 1); err != nil {
		t.Fatal(err)
	}
	other := transport.Destination{Broker: "kafka", Name: "other"}
	if p, err := r.AcquireN(t.Context(), other, 1); err == nil || p != (registry.Permit{}) {
		t.Fatalf("AcquireN beyond WithMaxDestinations: %v, %v; want an error and no permit", p, err)
	}
}

// Finish of a permit for a destination without a live circuit (here: another
// registry's) still completes the permit with Outcome and gives its slot back.
func TestFinishWithoutALiveCircuitCompletesThePermit(t *testing.T) {
	owner := newRegistry(t, registry.WithOverride("kafka:orders", limitedOne))
	r := newRegistry(t)
	ctx := t.Context()
	p, err := owner.Acquire(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	if o := r.Finish(ctx, orders, p, r.Start(ctx, orders), errBroker, 1, nil); o != breaker.Failure {
		t.Fatalf("Finish: %v, want Failure", o)
	}
	if s, lim := owner.Snapshots()[orders], limitOf(t, owner, orders); s.State != breaker.Open || lim.InFlight != 0 {
		t.Fatalf("the permit was not completed: %v, %d in flight under the limit", s.State, lim.InFlight)
	}
	if _, ok := r.Lookup(orders); ok {
		t.Fatal("Finish created a circuit")
	}
}

// An error that is not the call's deadline is judged as it is on a limited circuit,
// even on its first call (a cold limit excuses only deadline misses): it opens it.
func TestLimitedCircuitFirstErrorIsAFailure(t *testing.T) {
	r := newRegistry(t, registry.WithOverride("kafka:orders", limitedOne))
	down := r.Guard(&fakePublisher{fn: func(context.Context, transport.Destination) error { return errBroker }}, classify)
	if err := down.Publish(t.Context(), orders, transport.Message{}); !errors.Is(err, errBroker) {
		t.Fatal(err)
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Open {
		t.Fatalf("first call failed on a limited circuit: %v, want open", s.State)
	}
}

// A call of a limited circuit ended by a deadline too short to be a verdict is
// counted as Neutral; a probe's is counted as a neutral probe too.
func TestLimitDropsAreCountedNeutral(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRegistry(t, registry.WithCallCounts(), registry.WithOverride("kafka:orders", limitedOne))
		pub := r.Guard(hang, classify)
		short := func() {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			if err := pub.Publish(ctx, orders, transport.Message{}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("hung publish: %v", err)
			}
		}
		short()
		if c := callsOf(t, r, orders); c.Neutral != 1 || c.ProbesNeutral != 0 {
			t.Fatalf("after a short deadline miss: %+v, want one neutral", c)
		}
		if err := r.Guard(failingPublisher{errBroker}, classify).Publish(t.Context(), orders, transport.Message{}); !errors.Is(err, errBroker) {
			t.Fatal(err)
		}
		if s := r.Snapshots()[orders]; s.State != breaker.Open {
			t.Fatalf("%v, want open", s.State)
		}
		time.Sleep(time.Minute)
		short() // the probe
		if c := callsOf(t, r, orders); c.Neutral != 2 || c.ProbesNeutral != 1 {
			t.Fatalf("after a short deadline miss of the probe: %+v, want two neutral, one a probe", c)
		}
	})
}

// Circuits from a factory (shared ones) get the registry's admission control, kept
// in this process, as local ones do; the factory sees the circuit's policy alone.
func TestFactoryCircuitsGetAdmissionOfTheProcess(t *testing.T) {
	p := registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute, Scope: breaker.SharedDependency},
		Admission: admission.Policy{Limit: admission.LimitPolicy{Max: 10}}}
	var given breaker.Policy
	r := newRegistry(t, registry.WithOverride("kafka:orders", p),
		registry.WithCircuitFactory(breaker.SharedDependency, func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
			given = p
			p.Scope = breaker.LocalProcess
			return breaker.New(d.String(), p)
		}))
	held, err := r.AcquireN(t.Context(), orders, 8)
	if err != nil {
		t.Fatal(err)
	}
	if given != p.Circuit {
		t.Fatalf("the factory got %+v, want the circuit's policy %+v", given, p.Circuit)
	}
	err = r.Guard(&fakePublisher{}, classify).Publish(t.Context(), orders, make([]transport.Message, 3)...)
	if !errors.Is(err, admission.ErrOverLimit) {
		t.Fatalf("3 messages beside 8 of a limit of 10: %v, want refused by the limit", err)
	}
	r.Complete(orders, held, breaker.Success)
	if err := r.Guard(&fakePublisher{}, classify).Publish(t.Context(), orders, make([]transport.Message, 3)...); err != nil {
		t.Fatalf("3 messages once the 8 completed: %v", err)
	}
}
