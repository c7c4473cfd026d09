package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// fakePublisher returns what fn says and counts calls per destination.
type fakePublisher struct {
	calls sync.Map // destination -> *atomic.Int64
	fn    func(ctx context.Context, d transport.Destination) error
}

func (f *fakePublisher) Publish(ctx context.Context, d transport.Destination, _ ...transport.Message) error {
	n, _ := f.calls.LoadOrStore(d, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	if f.fn == nil {
		return nil
	}
	return f.fn(ctx, d)
}

func (f *fakePublisher) count(d transport.Destination) int64 {
	n, ok := f.calls.Load(d)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

var (
	errBroker = errors.New("broker down")
	errBadMsg = errors.New("message too large")
)

func classify(err error) breaker.Outcome {
	if errors.Is(err, errBadMsg) {
		return breaker.Neutral
	}
	return breaker.Failure
}

func TestGuardCompletesEveryPath(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		publish      func(ctx context.Context, d transport.Destination) error
		cancel       bool
		wantFailures int
	}{
		{name: "success", publish: func(context.Context, transport.Destination) error { return nil }, wantFailures: 0},
		{name: "broker error", publish: func(context.Context, transport.Destination) error { return errBroker }, wantFailures: 1},
		{name: "neutral error", publish: func(context.Context, transport.Destination) error { return errBadMsg }, wantFailures: 0},
		{name: "caller cancelled", cancel: true, wantFailures: 0, publish: func(ctx context.Context, _ transport.Destination) error {
			<-ctx.Done()
			return errBroker // the classifier would say Failure; the ended context wins
		}},
		{name: "partial batch with a broker failure", wantFailures: 1, publish: func(_ context.Context, d transport.Destination) error {
			return &transport.BatchError{Destination: d, Failed: []transport.MessageError{{Index: 0, Err: errBadMsg}, {Index: 1, Err: errBroker}}}
		}},
		{name: "partial batch of bad messages", wantFailures: 0, publish: func(_ context.Context, d transport.Destination) error {
			return &transport.BatchError{Destination: d, Failed: []transport.MessageError{{Index: 1, Err: errBadMsg}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, MaxInFlight: 1}}))
			g := r.Guard(&fakePublisher{fn: tc.publish}, classify)
			cctx, cancel := context.WithCancel(ctx)
			if tc.cancel {
				cancel()
			}
			defer cancel()
			g.Publish(cctx, orders, transport.Message{}, transport.Message{}, transport.Message{})
			s := r.Snapshots()[orders]
			if s.Failures != tc.wantFailures || s.InFlight != 0 {
				t.Fatalf("failures %d in flight %d, want %d and 0", s.Failures, s.InFlight, tc.wantFailures)
			}
		})
	}
}

// A publisher or a classifier that panics says nothing about the broker: the permit
// is completed Neutral and the panic goes on, so that a caller that recovers (an HTTP
// server does) does not leave the circuit's in-flight slot, its probe, or its
// admission slot taken.
func TestGuardCompletesNeutralOnPanicAndRepanics(t *testing.T) {
	for _, tc := range []struct {
		name     string
		publish  func(context.Context, transport.Destination) error
		classify transport.Classifier
		want     string
	}{
		{"publisher", func(context.Context, transport.Destination) error { panic("publisher bug") }, classify, "publisher bug"},
		{"classifier", func(context.Context, transport.Destination) error { return errBroker },
			func(error) breaker.Outcome { panic("classifier bug") }, "classifier bug"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxInFlight: 1},
				Admission: admission.Policy{Limit: admission.LimitPolicy{Max: 1}}}))
			g := r.Guard(&fakePublisher{fn: tc.publish}, tc.classify)
			func() {
				defer func() {
					if recover() != tc.want {
						t.Fatal("the panic was swallowed or changed")
					}
				}()
				g.Publish(context.Background(), orders, transport.Message{})
			}()
			s := r.Snapshots()[orders]
			if s.InFlight != 0 || s.Failures != 0 || s.State != breaker.Closed {
				t.Fatalf("after a panic: %+v", s)
			}
			if lim, _ := r.Admission(orders); lim.Stats().InFlight != 0 || !lim.Cold() {
				t.Fatalf("after a panic: admission %+v (cold %v), want the slot back and nothing learned", lim.Stats(), lim.Cold())
			}
		})
	}
}

// A Classifier is the caller's code too: when it panics the permit must still be
// given back, or with MaxInFlight 1 the destination is saturated for good.
func TestGuardCompletesNeutralWhenTheClassifierPanics(t *testing.T) {
	r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxInFlight: 1}}))
	g := r.Guard(&fakePublisher{fn: func(context.Context, transport.Destination) error { return errBroker }},
		func(error) breaker.Outcome { panic("classifier bug") })
	func() {
		defer func() {
			if recover() != "classifier bug" {
				t.Fatal("the panic was swallowed or changed")
			}
		}()
		g.Publish(context.Background(), orders, transport.Message{})
	}()
	s := r.Snapshots()[orders]
	if s.InFlight != 0 || s.Failures != 0 || s.State != breaker.Closed {
		t.Fatalf("after a classifier panic: %+v", s)
	}
}

func TestGuardRejectsWithoutCallingThePublisher(t *testing.T) {
	r := newRegistry(t)
	pub := &fakePublisher{fn: func(context.Context, transport.Destination) error { return errBroker }}
	g := r.Guard(pub, classify)
	ctx := context.Background()
	m := transport.Message{}
	g.Publish(ctx, orders, m)
	g.Publish(ctx, orders, m)
	err := g.Publish(ctx, orders, m)
	var rej *registry.RejectedError
	var oe *breaker.OpenError
	if !errors.As(err, &rej) || !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &oe) || rej.Destination != orders {
		t.Fatalf("rejection: %v", err)
	}
	if pub.count(orders) != 2 {
		t.Fatalf("publisher called %d times, want 2", pub.count(orders))
	}
	if err := g.Publish(ctx, transport.Destination{Broker: "kafka"}); !errors.Is(err, transport.ErrInvalidDestination) {
		t.Fatalf("invalid destination: %v", err)
	}
}

// One failing destination never makes another reject, under contention.
func TestFailingDestinationNeverRejectsOthers(t *testing.T) {
	r := newRegistry(t)
	bad := transport.Destination{Broker: "kafka", Name: "d-13"}
	pub := &fakePublisher{fn: func(_ context.Context, d transport.Destination) error {
		if d == bad {
			return errBroker
		}
		return nil
	}}
	g := r.Guard(pub, classify)
	dests := make([]transport.Destination, 1000)
	for i := range dests {
		dests[i] = transport.Destination{Broker: "kafka", Name: fmt.Sprint("d-", i)}
	}
	// Each worker reaches every destination but a tenth (those its bad calls stand in
	// for, a different tenth per worker) once per thousand calls.
	workers, each := 64, 2000
	if testing.Short() {
		workers, each = 16, 1000
	}
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				d := dests[(w*7919+i*31)%len(dests)]
				if i%10 == 0 {
					d = bad
				}
				err := g.Publish(context.Background(), d, transport.Message{})
				if err != nil && d != bad {
					wrong.Add(1)
					t.Errorf("%s: %v", d, err)
				}
			}
		})
	}
	wg.Wait()
	if wrong.Load() != 0 {
		t.Fatalf("%d calls to healthy destinations failed", wrong.Load())
	}
	if s := r.Snapshots()[bad]; s.State != breaker.Open {
		t.Fatalf("the failing destination is %v", s.State)
	}
	if r.Len() != 1000 {
		t.Fatalf("%d circuits", r.Len())
	}
}

// Modes resolve per destination like any policy field; a FailOpen destination keeps
// flowing through the guard, audited once per call.
func TestGuardWithRolloutModes(t *testing.T) {
	failing := func(context.Context, transport.Destination) error { return errBroker }
	var audit []string
	r := newRegistry(t,
		registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour, Mode: breaker.FailOpen}}),
		registry.WithOverride("kafka:refunds", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour, Mode: breaker.Shadow}}),
		registry.WithBypassHook(func(d transport.Destination, b breaker.Bypass) { audit = append(audit, d.String()+"/"+b.Mode.String()) }))
	pub := &fakePublisher{fn: failing}
	g := r.Guard(pub, classify)
	ctx := context.Background()
	for _, d := range []transport.Destination{orders, refunds, orders, refunds} {
		if err := g.Publish(ctx, d, transport.Message{}); errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("%s rejected in a non-enforcing mode", d)
		}
	}
	if pub.count(orders) != 2 || pub.count(refunds) != 2 {
		t.Fatalf("calls %d and %d, want every call made", pub.count(orders), pub.count(refunds))
	}
	if len(audit) != 2 || audit[0] != "kafka:orders/fail-open" || audit[1] != "kafka:refunds/shadow" {
		t.Fatalf("audit %v", audit)
	}
	for _, d := range []transport.Destination{orders, refunds} {
		if s := r.Snapshots()[d]; s.State != breaker.Open || s.Bypassed != 1 {
			t.Fatalf("%s: %+v", d, s)
		}
	}
	if err := r.Guard(pub, classify).Publish(ctx, transport.Destination{Broker: "kafka", Name: "enforced"}); err == nil {
		t.Fatal("the failing publisher's error was lost")
	}
}

// Call is Guard's rule for adapters that guard their own SDK calls.
func TestCallCompletesOnceAndRefusesWithoutCalling(t *testing.T) {
	r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour, MaxInFlight: 1}}))
	ctx := context.Background()
	if err := r.Call(ctx, orders, 1, nil, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.Call(ctx, orders, 1, nil, func(context.Context) error { return errBroker }); err != errBroker {
		t.Fatalf("Call returned %v, want the call's own error", err)
	}
	ran := false
	err := r.Call(ctx, orders, 1, nil, func(context.Context) error { ran = true; return nil })
	var rej *registry.RejectedError
	if ran || !errors.As(err, &rej) || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("open circuit: ran %v, err %v", ran, err)
	}
	if s := r.Snapshots()[orders]; s.InFlight != 0 {
		t.Fatalf("in flight %d", s.InFlight)
	}
	p, err := r.Acquire(ctx, refunds)
	if err != nil || !r.Complete(refunds, p, breaker.Success) {
		t.Fatalf("Acquire: %v", err)
	}
}
