package registry_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// prbStalledBroker answers at once while healthy; while stalled it holds every call
// until it recovers (then answers it, as a stalled broker that catches up does) or
// the caller's deadline ends.
type prbStalledBroker struct {
	mu        sync.Mutex
	recovered chan struct{} // nil while healthy
}

func (b *prbStalledBroker) Publish(ctx context.Context, _ transport.Destination, _ ...transport.Message) error {
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

func (b *prbStalledBroker) stall() {
	b.mu.Lock()
	b.recovered = make(chan struct{})
	b.mu.Unlock()
}

func (b *prbStalledBroker) recover() {
	b.mu.Lock()
	close(b.recovered)
	b.recovered = nil
	b.mu.Unlock()
}

// prbPublishWithin publishes to orders under a deadline of d.
func prbPublishWithin(pub transport.Publisher, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return pub.Publish(ctx, orders, transport.Message{})
}

// A hung broker's probe that waited out its 500ms deadline is followed by the next
// probe a tenth of a Window (10ms) later, so a probe is in flight when the broker
// recovers (unless it falls in those 10ms), and the circuit
// closes as soon as the broker answers it, not one Window (or a deadline) later.
// Meanwhile the other callers are refused at once and told to come back in one
// Window, and one probe at a time reaches the broker.
func TestMissedProbeOfAHungBrokerIsFollowedAtOnceAndSeesTheRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRegistry(t, registry.WithOverride("kafka:orders", limitedOne))
		broker := &prbStalledBroker{}
		pub := r.Guard(broker, classify)
		for range 20 { // the limit learns its baseline
			if err := prbPublishWithin(pub, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		window := breaker.RecommendedLimit().Window
		broker.stall()
		time.Sleep(1500 * time.Millisecond) // no answer within the last second
		if err := prbPublishWithin(pub, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call to the stalled broker: %v", err)
		}
		wantOpenFor(t, r.Snapshots()[orders], window) // opened from closed: one Window
		time.Sleep(window)
		for i := range 3 {
			// The probe: it waits out its deadline, and the next caller, a tenth of a
			// Window later, is the next probe.
			if err := prbPublishWithin(pub, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("probe %d: %v, want its deadline", i, err)
			}
			wantOpenFor(t, r.Snapshots()[orders], window/10)
			time.Sleep(window / 10)
		}
		if s := r.Snapshots()[orders]; s.FailedProbes != 3 {
			t.Fatalf("%d failed probes, want 3 (one per deadline and a tenth of a Window)", s.FailedProbes)
		}
		probe := make(chan error, 1)
		go func() { probe <- prbPublishWithin(pub, 500*time.Millisecond) }()
		synctest.Wait() // the probe is in flight
		time.Sleep(200 * time.Millisecond)
		var oe *breaker.OpenError
		if err := prbPublishWithin(pub, 500*time.Millisecond); !errors.As(err, &oe) || !oe.NotBefore.Equal(time.Now().Add(window)) {
			t.Fatalf("a call while the probe is in flight: %v, want refused until one Window from now", err)
		}
		broker.recover()
		if err := <-probe; err != nil {
			t.Fatalf("the probe in flight at the recovery: %v", err)
		}
		s := r.Snapshots()[orders]
		if s.State != breaker.Closed {
			t.Fatalf("circuit %v once the probe in flight was answered, want closed", s.State)
		}
		if err := prbPublishWithin(pub, 500*time.Millisecond); err != nil {
			t.Fatalf("first call after the recovery: %v", err)
		}
	})
}
