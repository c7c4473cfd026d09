package registry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// trickle probes every 100ms while open, doubling after probes failed with an error
// answer up to 800ms; a probe may wait out any deadline below.
var trickle = breaker.Policy{FailureThreshold: 1, BreakDuration: 100 * time.Millisecond, MaxBreakDuration: 800 * time.Millisecond,
	ProbeLease: 10 * time.Second}

// wantOpenFor asserts that orders' circuit is open until d from now.
func wantOpenFor(t *testing.T, s breaker.Snapshot, d time.Duration) {
	t.Helper()
	if s.State != breaker.Open || !s.NotBefore.Equal(time.Now().Add(d)) {
		t.Fatalf("circuit %v until %v from now, want open for %v", s.State, time.Until(s.NotBefore), d)
	}
}

// stalledBroker answers at once while healthy; while stalled it holds every call
// until it recovers (then answers it, as a stalled broker that catches up does) or
// the caller's deadline ends.
type stalledBroker struct {
	mu        sync.Mutex
	recovered chan struct{} // nil while healthy
}

func (b *stalledBroker) Publish(ctx context.Context, _ transport.Destination, _ ...transport.Message) error {
	b.mu.Lock()
	wait := b.recovered
	b.mu.Unlock()
	if wait == nil {
		return nil
	}
	select {
	case <-wait:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *stalledBroker) stall() {
	b.mu.Lock()
	b.recovered = make(chan struct{})
	b.mu.Unlock()
}

func (b *stalledBroker) recover() {
	b.mu.Lock()
	close(b.recovered)
	b.recovered = nil
	b.mu.Unlock()
}

// publishWithin publishes to orders under a deadline of d.
func publishWithin(pub transport.Publisher, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return pub.Publish(ctx, orders, transport.Message{})
}

// A deadline that ends a call which had its budget is a missed deadline to the
// circuit (breaker.Permit.CompleteMissed), with or without admission control: a hung
// broker's probe that waited out its 500ms deadline is followed by the next probe a
// tenth of a break (10ms) later, so a probe is in flight when the broker recovers and
// the circuit closes as soon as the broker answers it. Meanwhile the other callers are
// refused at once and told to come back when the probe in flight, missing too, would
// let the next one in; one probe at a time reaches the broker.
func TestDeadlineMissesProbeAHungBrokerBackToBack(t *testing.T) {
	for _, adm := range []admission.Policy{{}, admission.DefaultPolicy()} {
		t.Run(fmt.Sprintf("admission %v", adm.Enabled()), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: trickle, Admission: adm}))
				broker := &stalledBroker{}
				pub := r.Guard(broker, classify)
				for range 20 {
					if err := publishWithin(pub, time.Second); err != nil {
						t.Fatal(err)
					}
				}
				broker.stall()
				time.Sleep(1500 * time.Millisecond) // no answer within the last second
				if err := publishWithin(pub, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("call to the stalled broker: %v", err)
				}
				wantOpenFor(t, r.Snapshots()[orders], 100*time.Millisecond) // opened from closed: a break
				time.Sleep(100 * time.Millisecond)
				for i := range 3 {
					if err := publishWithin(pub, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("probe %d: %v, want its deadline", i, err)
					}
					s := r.Snapshots()[orders]
					wantOpenFor(t, s, 10*time.Millisecond)
					if s.LastError == "" {
						t.Fatal("the missed probe's error is not kept")
					}
					time.Sleep(10 * time.Millisecond)
				}
				if s := r.Snapshots()[orders]; s.FailedProbes != 3 {
					t.Fatalf("%d failed probes, want 3", s.FailedProbes)
				}
				probe := make(chan error, 1)
				go func() { probe <- publishWithin(pub, 500*time.Millisecond) }()
				synctest.Wait() // the probe is in flight
				time.Sleep(200 * time.Millisecond)
				var oe *breaker.OpenError
				if err := publishWithin(pub, 500*time.Millisecond); !errors.As(err, &oe) || !oe.NotBefore.Equal(time.Now().Add(10*time.Millisecond)) {
					t.Fatalf("a call while the probe is in flight: %v, want refused until the gap from now", err)
				}
				broker.recover()
				if err := <-probe; err != nil {
					t.Fatalf("the probe in flight at the recovery: %v", err)
				}
				if s := r.Snapshots()[orders]; s.State != breaker.Closed || s.FailedProbes != 0 {
					t.Fatalf("after the probe succeeded: %v (%d failed probes), want closed", s.State, s.FailedProbes)
				}
			})
		})
	}
}

// erring fails every call with its error, before the caller's deadline.
type erring struct{ err error }

func (b erring) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return b.err
}

// A failure that says the broker did not answer in time by the client's own clock
// (transport.ErrNoAnswer, a net timeout) is a missed deadline too: a hung broker's
// probes fail so once the client has closed its connection, and must not lengthen
// the break, as a probe failed with an error answer does.
func TestNoAnswerErrorIsAMissedDeadline(t *testing.T) {
	for _, c := range []struct {
		err    error
		reopen time.Duration
	}{
		{fmt.Errorf("publish: %w", transport.ErrNoAnswer), 100 * time.Millisecond},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, 100 * time.Millisecond},
		{errBroker, 200 * time.Millisecond}, // an error answer: the break doubles
	} {
		t.Run(c.err.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: trickle, Admission: admission.DefaultPolicy()}))
				pub := r.Guard(erring{c.err}, classify)
				_ = pub.Publish(t.Context(), orders, transport.Message{})
				wantOpenFor(t, r.Snapshots()[orders], 100*time.Millisecond)
				time.Sleep(100 * time.Millisecond)
				_ = pub.Publish(t.Context(), orders, transport.Message{}) // the probe
				wantOpenFor(t, r.Snapshots()[orders], c.reopen)
			})
		})
	}
}
