package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// busyBroker answers online calls at once, holds bulk calls until release is
// closed, and lets online calls hang while hangOnline is set.
type busyBroker struct {
	release    chan struct{}
	mu         sync.Mutex
	hangOnline bool
}

func (b *busyBroker) Publish(ctx context.Context, _ transport.Destination, _ ...transport.Message) error {
	if admission.PriorityOf(ctx) == admission.Bulk {
		select {
		case <-b.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	hang := b.hangOnline
	b.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	time.Sleep(time.Millisecond)
	return nil
}

func (b *busyBroker) hang(on bool) {
	b.mu.Lock()
	b.hangOnline = on
	b.mu.Unlock()
}

// limitOf returns the view of d's adaptive limit in r.
func limitOf(t *testing.T, r *registry.Registry, d transport.Destination) admission.LimitStats {
	t.Helper()
	lim, err := r.Admission(d)
	if err != nil || lim == nil {
		t.Fatalf("Admission(%s) = %v, %v; want a limit", d, lim, err)
	}
	return lim.Stats()
}

var limitedOne = registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, Admission: admission.DefaultPolicy()}

// busySetup returns a registry whose destination has learned its baseline from 20
// online successes of a busyBroker, and the guarded publisher.
func busySetup(t *testing.T) (*registry.Registry, *busyBroker, transport.Publisher) {
	t.Helper()
	r := newRegistry(t, registry.WithOverride("kafka:orders", limitedOne))
	broker := &busyBroker{release: make(chan struct{})}
	pub := r.Guard(broker, classify)
	for range 20 {
		if err := pub.Publish(t.Context(), orders, transport.Message{}); err != nil {
			t.Fatal(err)
		}
	}
	return r, broker, pub
}

// onlineDeadline makes one online call whose broker does not answer before its
// 200ms deadline.
func onlineDeadline(t *testing.T, pub transport.Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := pub.Publish(ctx, orders, transport.Message{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("online publish: %v, want its deadline", err)
	}
}

// A deadline miss while this process's bulk work keeps the destination busy, and
// the destination still answers, is no evidence against it: the circuit stays
// closed, and the limit takes the miss as a drop.
func TestDeadlineMissOfABusyDestinationIsNoVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, broker, pub := busySetup(t)
		done := make(chan error)
		go func() {
			done <- pub.Publish(admission.WithPriority(t.Context(), admission.Bulk), orders, make([]transport.Message, 100)...)
		}()
		synctest.Wait()
		if s := limitOf(t, r, orders); s.BulkInFlight != 100 {
			t.Fatalf("bulk in flight %d, want the batch's 100 messages", s.BulkInFlight)
		}
		broker.hang(true)
		time.Sleep(500 * time.Millisecond) // the last success is 500ms old: still recent
		onlineDeadline(t, pub)
		if s := r.Snapshots()[orders]; s.State != breaker.Closed || s.Failures != 0 {
			t.Fatalf("busy destination: %v with %d failures, want closed with none", s.State, s.Failures)
		}
		close(broker.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A hung broker is never busy: with bulk work in flight but no answer for more than
// a second, a deadline miss is a Failure and opens the circuit as before.
func TestDeadlineMissOfAHungBrokerOpensDespiteBulkWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, broker, pub := busySetup(t)
		bctx, cancel := context.WithCancel(t.Context())
		go pub.Publish(admission.WithPriority(bctx, admission.Bulk), orders, make([]transport.Message, 10)...)
		broker.hang(true)
		time.Sleep(1500 * time.Millisecond)
		onlineDeadline(t, pub)
		if s := r.Snapshots()[orders]; s.State != breaker.Open {
			t.Fatalf("hung broker with bulk in flight: %v, want open", s.State)
		}
		cancel()
		synctest.Wait()
	})
}

// Without bulk work a deadline miss counts as it always did.
func TestDeadlineMissWithoutBulkWorkIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, broker, pub := busySetup(t)
		broker.hang(true)
		onlineDeadline(t, pub)
		if s := r.Snapshots()[orders]; s.State != breaker.Open {
			t.Fatalf("deadline miss without bulk work: %v, want open", s.State)
		}
	})
}

// Guarded publishes are weighed by their messages when the limit is on.
func TestGuardWeighsCallsByTheirMessages(t *testing.T) {
	r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}, Admission: admission.Policy{Limit: admission.LimitPolicy{Max: 10}}}))
	hold := make(chan struct{})
	started := make(chan struct{})
	pub := r.Guard(&fakePublisher{fn: func(ctx context.Context, _ transport.Destination) error {
		close(started)
		<-hold
		return nil
	}}, classify)
	go pub.Publish(t.Context(), orders, make([]transport.Message, 8)...)
	<-started
	err := r.Guard(&fakePublisher{}, classify).Publish(t.Context(), orders, make([]transport.Message, 3)...)
	var le *admission.LimitError
	if !errors.As(err, &le) || !errors.Is(err, admission.ErrOverLimit) {
		t.Fatalf("8+3 messages under a limit of 10: %v, want a *LimitError", err)
	}
	if err := r.Guard(&fakePublisher{}, classify).Publish(t.Context(), orders, make([]transport.Message, 2)...); err != nil {
		t.Fatalf("8+2 messages under a limit of 10: %v", err)
	}
	close(hold)
}

// Idle eviction keeps a closed circuit that holds failure evidence: rare traffic to
// a dead broker (one call per 10 minutes here, idle time 5 minutes) must still open
// it, which eviction would prevent by forgetting the failures.
func TestIdleEvictionKeepsFailureEvidence(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t, registry.WithClock(clock), registry.WithIdleEviction(5*time.Minute),
		registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}}))
	down := r.Guard(&fakePublisher{fn: func(context.Context, transport.Destination) error { return errors.New("broker down") }}, classify)
	first, _ := r.Circuit(orders)
	for i := range 3 {
		if err := down.Publish(t.Context(), orders, transport.Message{}); err == nil {
			t.Fatal("publish to a dead broker succeeded")
		}
		r.EvictIdle()
		clock.Advance(10 * time.Minute)
		r.EvictIdle()
		if c, _ := r.Lookup(orders); c != first {
			t.Fatalf("after failure %d the circuit holding failure evidence was evicted", i+1)
		}
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Open {
		t.Fatalf("rare failures: circuit %v, want open", s.State)
	}
	clock.Advance(time.Hour)
	r.EvictIdle()
	r.EvictIdle()
	if _, ok := r.Lookup(orders); !ok {
		t.Fatal("a circuit that is not closed was evicted")
	}
}

// hungFromTheStart returns a fresh registry whose orders circuit (threshold 5, the
// default admission control) has seen no call, and a publisher guarded by it whose
// online calls hang until their deadlines.
func hungFromTheStart(t *testing.T) (*registry.Registry, transport.Publisher) {
	t.Helper()
	r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, Admission: admission.DefaultPolicy()}))
	broker := &busyBroker{release: make(chan struct{})}
	broker.hang(true)
	return r, r.Guard(broker, classify)
}

// A cold process's first wave of calls (admitted before any call to the destination
// had completed) that miss their deadlines is no verdict; the next wave is judged,
// so a broker hung from the start opens one wave later.
func TestColdStartFirstWaveIsNoVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, pub := hungFromTheStart(t)
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() { onlineDeadline(t, pub) })
		}
		wg.Wait()
		if s := r.Snapshots()[orders]; s.State != breaker.Closed || s.Failures != 0 {
			t.Fatalf("after a cold first wave: %v with %d failures, want closed with none", s.State, s.Failures)
		}
		for range 5 {
			onlineDeadline(t, pub)
		}
		if s := r.Snapshots()[orders]; s.State != breaker.Open {
			t.Fatalf("a broker hung from the start: %v after the second wave, want open", s.State)
		}
	})
}

// Only a wave is excused at a cold start: a hung call that had another call in flight
// beside it, whether that one ends before or after it, is no verdict; a call alone,
// however many messages it carries, is a Failure like any later one.
func TestColdStartExcusesAWaveNotACallAlone(t *testing.T) {
	for _, tc := range []struct {
		name         string
		calls        []int // messages of each call, all started at once
		deadlines    []time.Duration
		wantFailures int
	}{
		{"one call alone", []int{1}, []time.Duration{200 * time.Millisecond}, 1},
		{"a batch alone", []int{10}, []time.Duration{200 * time.Millisecond}, 1},
		{"two calls, one ending later", []int{1, 1}, []time.Duration{200 * time.Millisecond, 300 * time.Millisecond}, 0},
		{"a batch and a call, the call ending later", []int{10, 1}, []time.Duration{200 * time.Millisecond, 300 * time.Millisecond}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, pub := hungFromTheStart(t)
				var wg sync.WaitGroup
				for i, n := range tc.calls {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(t.Context(), tc.deadlines[i])
						defer cancel()
						if err := pub.Publish(ctx, orders, make([]transport.Message, n)...); !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("call of %d messages: %v, want its deadline", n, err)
						}
					})
				}
				wg.Wait()
				if s := r.Snapshots()[orders]; s.Failures != tc.wantFailures {
					t.Fatalf("cold start, calls %v: %d failures, want %d", tc.calls, s.Failures, tc.wantFailures)
				}
			})
		})
	}
}

// setUpMiss makes one online call through r that, like a publish still waiting for
// its channel to open, ends by its 200ms deadline with none of its messages sent
// (transport.ErrNotSent).
func setUpMiss(t *testing.T, r *registry.Registry) {
	t.Helper()
	onlineDeadline(t, r.Guard(&fakePublisher{fn: func(ctx context.Context, _ transport.Destination) error {
		<-ctx.Done()
		return fmt.Errorf("%w: %w", transport.ErrNotSent, ctx.Err())
	}}, classify))
}

// A call whose deadline passes while the client is still setting up (a channel
// opening at a slow broker's pace) is no verdict while the broker answers other
// calls: the circuit stays closed.
func TestSetUpDeadlineMissOfAnAnsweringBrokerIsNoVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, _ := busySetup(t) // the last success is now
		setUpMiss(t, r)
		if s := r.Snapshots()[orders]; s.State != breaker.Closed || s.Failures != 0 {
			t.Fatalf("set-up miss of an answering broker: %v with %d failures, want closed with none", s.State, s.Failures)
		}
		// No verdict, but the call is over: its permit gives its place in the limit back.
		if n := limitOf(t, r, orders).InFlight; n != 0 {
			t.Fatalf("%d calls in flight after the set-up miss, want its permit completed", n)
		}
	})
}

// A hung broker answers nothing: more than a second after its last success, a call
// that missed its deadline in set-up is a Failure, and opens the circuit.
func TestSetUpDeadlineMissOfAHungBrokerIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _, _ := busySetup(t)
		time.Sleep(900 * time.Millisecond) // the miss ends 1.1s after the last success
		setUpMiss(t, r)
		if s := r.Snapshots()[orders]; s.State != breaker.Open {
			t.Fatalf("set-up miss of a hung broker: %v, want open", s.State)
		}
	})
}

// A broker whose last window of calls was answered in time is slow or overloaded,
// not sick: a deadline miss is a drop for the limit, not a Failure. Once a window
// of misses has closed, it answers too little, and a miss opens the circuit.
func TestDeadlineMissOfAnAnsweringBrokerIsNoVerdictUntilAWindowOfMisses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, broker, pub := busySetup(t)
		for range 10 { // successes over more than one window of the limit
			if err := pub.Publish(t.Context(), orders, transport.Message{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		broker.hang(true)
		onlineDeadline(t, pub)
		if s := r.Snapshots()[orders]; s.State != breaker.Closed || s.Failures != 0 {
			t.Fatalf("miss of a broker that answered its last window: %v with %d failures, want closed with none", s.State, s.Failures)
		}
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { onlineDeadline(t, pub) })
		}
		wg.Wait()
		if s := r.Snapshots()[orders]; s.State != breaker.Open {
			t.Fatalf("after a window of misses: %v, want open", s.State)
		}
	})
}
