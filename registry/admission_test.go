package registry_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The composition of a destination's circuit and its admission control.

// limitedTo is a policy whose circuit opens after 2 failures in a row and whose
// admission limit is n messages.
func limitedTo(n int) registry.Policy {
	return registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second, MaxInFlight: 5},
		Admission: admission.Policy{Limit: admission.LimitPolicy{Max: n}}}
}

// The circuit decides first: an open circuit refuses without touching admission
// control, and a call admission control refuses gives the circuit's permit (its
// in-flight slot) back unchanged.
func TestCircuitFirstThenAdmission(t *testing.T) {
	r := newRegistry(t, registry.WithOverride("kafka:orders", limitedTo(1)))
	held, err := r.Acquire(t.Context(), orders)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, err := r.Acquire(t.Context(), orders)
		var re *registry.RejectedError
		if !errors.As(err, &re) || !errors.Is(err, admission.ErrOverLimit) || errors.Is(err, breaker.ErrSaturated) {
			t.Fatalf("a call past the limit: %v, want a *RejectedError of the limit", err)
		}
	}
	if s := r.Snapshots()[orders]; s.InFlight != 1 {
		t.Fatalf("circuit in flight %d after the limit's refusals, want the held call's 1", s.InFlight)
	}
	r.CompleteWith(orders, held, breaker.Failure, errBroker)
	fail := r.Guard(failing{}, classify)
	if err := fail.Publish(t.Context(), orders, transport.Message{}); err == nil {
		t.Fatal("failing publish succeeded")
	}
	lim, _ := r.Admission(orders)
	refused := lim.Stats().Refused
	if _, err := r.Acquire(t.Context(), orders); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("a call to an open circuit: %v, want ErrOpen", err)
	}
	if s := lim.Stats(); s.Refused != refused || s.InFlight != 0 {
		t.Fatalf("admission after the open circuit's refusal: %+v, want nothing taken or refused", s)
	}
}

// Every way to end a call gives its admission slot back exactly once: Complete,
// CompleteWith of a failure with its error, Finish, and a guarded call that
// succeeds, fails or panics; a second completion of the same permit gives nothing
// back twice.
func TestEveryCompletionGivesTheSlotBackOnce(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		end  func(r *registry.Registry, p registry.Permit)
	}{
		{"Complete", func(r *registry.Registry, p registry.Permit) { r.Complete(orders, p, breaker.Success) }},
		{"CompleteWith", func(r *registry.Registry, p registry.Permit) { r.CompleteWith(orders, p, breaker.Failure, errBroker) }},
		{"Finish", func(r *registry.Registry, p registry.Permit) {
			r.Finish(ctx, orders, p, r.Start(ctx, orders), errBroker, 2, classify)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := limitedTo(10)
			p.Circuit.FailureThreshold = 100
			r := newRegistry(t, registry.WithOverride("kafka:orders", p))
			for range 3 {
				p, err := r.AcquireN(ctx, orders, 4)
				if err != nil {
					t.Fatal(err)
				}
				other, err := r.AcquireN(ctx, orders, 4)
				if err != nil {
					t.Fatal(err)
				}
				c.end(r, p)
				c.end(r, p) // a second completion: nothing
				if got := limitOf(t, r, orders).InFlight; got != 4 {
					t.Fatalf("in flight %d after one of two calls of 4 ended (twice), want 4", got)
				}
				r.Complete(orders, other, breaker.Neutral)
			}
		})
	}
	r := newRegistry(t, registry.WithOverride("kafka:orders", limitedTo(10)))
	for _, call := range []func(context.Context) error{
		func(context.Context) error { return nil },
		func(context.Context) error { return errBroker },
	} {
		_ = r.Call(ctx, orders, 10, classify, call)
		if got := limitOf(t, r, orders).InFlight; got != 0 {
			t.Fatalf("in flight %d after a guarded call, want 0", got)
		}
	}
}

// A cold process's first wave, a destination busy with bulk work and a slow one
// answering most calls keep their judgements, but the deadline rule comes first: a
// call that started with less than MinCallBudget says nothing to admission control
// either. Half the callers with 50ms deadlines against a broker answering in 100ms
// (their calls all end by their deadlines) must not contract the limit that the
// callers with 2s deadlines see, nor teach it their deadline.
func TestShortDeadlinesDoNotContractTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: policy.Circuit, Admission: admission.DefaultPolicy()}))
		slow := r.Guard(&fakePublisher{fn: func(ctx context.Context, _ transport.Destination) error {
			select {
			case <-time.After(100 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}, classify)
		var mu sync.Mutex
		refused := 0
		call := func(deadline time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			err := slow.Publish(ctx, orders, transport.Message{})
			if errors.Is(err, admission.ErrOverLimit) {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		}
		for range 60 { // six seconds of rounds, 20 callers in flight
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() { call(50 * time.Millisecond) })
				wg.Go(func() { call(2 * time.Second) })
			}
			wg.Wait()
		}
		if s := limitOf(t, r, orders); refused != 0 || s.Limit != admission.DefaultPolicy().Limit.Max {
			t.Fatalf("%d calls refused, limit %+v; want none refused and the limit at its Max", refused, s)
		}
		if s := r.Snapshots()[orders]; s.State != breaker.Closed || s.Failures != 0 {
			t.Fatalf("circuit %v with %d failures, want closed with none", s.State, s.Failures)
		}
	})
}

// When the circuit closes after an outage (its probe succeeded), the registry tells
// admission control: the limit returns to what it was in its last healthy window
// instead of exploring up from where the outage's drops left it.
func TestCircuitRecoveryRestoresTheLimit(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t, registry.WithClock(clock), registry.WithOverride("kafka:orders", limitedTo(300)))
	lim, err := r.Admission(orders)
	if err != nil {
		t.Fatal(err)
	}
	round := func(n int, latency time.Duration, res admission.Result) {
		var slots []admission.Slot
		for range n {
			if s, err := lim.Acquire(1, admission.Online); err == nil {
				slots = append(slots, s)
			}
		}
		clock.Advance(latency)
		for _, s := range slots {
			s.Release(res)
		}
	}
	for range 30 {
		round(100, time.Millisecond, admission.Success)
		clock.Advance(100 * time.Millisecond)
	}
	healthy := lim.Stats().Limit
	for range 8 {
		round(20, 500*time.Millisecond, admission.Dropped)
	}
	low := lim.Stats().Limit
	if low >= healthy/4 {
		t.Fatalf("after drops the limit is %d (healthy %d), want contracted", low, healthy)
	}
	fail := r.Guard(failing{}, classify)
	for range 2 {
		_ = fail.Publish(t.Context(), orders, transport.Message{})
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Open || lim.Stats().Limit != low {
		t.Fatalf("circuit %v, limit %d; want open, the limit untouched by the opening", s.State, lim.Stats().Limit)
	}
	clock.Advance(time.Second)
	if err := r.Guard(&fakePublisher{}, classify).Publish(t.Context(), orders, transport.Message{}); err != nil {
		t.Fatal(err) // the probe
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Closed || lim.Stats().Limit < healthy {
		t.Fatalf("after the probe: %v, limit %d; want closed, the limit back to %d", s.State, lim.Stats().Limit, healthy)
	}
}

// A half-open circuit's probe is never refused by admission control, however full the
// limit: it takes no slot.
func TestProbesTakeNoAdmissionSlot(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t, registry.WithClock(clock), registry.WithOverride("kafka:orders", limitedTo(1)))
	held, err := r.Acquire(t.Context(), orders)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := r.Circuit(orders)
	c.(*breaker.Breaker).ForceOpen(clock.Now().Add(time.Second))
	clock.Advance(time.Second)
	probe, err := r.Acquire(t.Context(), orders)
	if err != nil || !probe.Probe() {
		t.Fatalf("the call after the hold, the limit full: probe %v, %v; want a probe", probe.Probe(), err)
	}
	if got := limitOf(t, r, orders).InFlight; got != 1 {
		t.Fatalf("in flight under the limit %d, want the held call's 1", got)
	}
	r.Complete(orders, probe, breaker.Success)
	r.Complete(orders, held, breaker.Neutral)
}

// Under Shadow, a call admission control would refuse is admitted and told to the
// bypass hooks, and its outcome counts for nothing in the closed circuit: its Success
// neither resets the failures nor reports itself taken. FailOpen enforces the limit,
// as it enforces MaxInFlight.
func TestShadowWatchesTheLimitAndFailOpenEnforcesIt(t *testing.T) {
	for _, mode := range []breaker.Mode{breaker.Shadow, breaker.FailOpen} {
		t.Run(mode.String(), func(t *testing.T) {
			p := limitedTo(1)
			p.Circuit.Mode = mode
			var bypasses []breaker.Bypass
			r := newRegistry(t, registry.WithOverride("kafka:orders", p),
				registry.WithBypassHook(func(_ transport.Destination, b breaker.Bypass) { bypasses = append(bypasses, b) }))
			if mode == breaker.Shadow { // without hooks too
				quiet := newRegistry(t, registry.WithOverride("kafka:orders", p))
				if _, err := quiet.Acquire(t.Context(), orders); err != nil {
					t.Fatal(err)
				}
				if _, err := quiet.Acquire(t.Context(), orders); err != nil {
					t.Fatalf("Shadow past the limit, no bypass hook: %v, want admitted", err)
				}
			}
			_ = r.Guard(failing{}, classify).Publish(t.Context(), orders, transport.Message{})
			held, err := r.Acquire(t.Context(), orders)
			if err != nil {
				t.Fatal(err)
			}
			bp, err := r.Acquire(t.Context(), orders)
			if mode == breaker.FailOpen {
				if !errors.Is(err, admission.ErrOverLimit) || len(bypasses) != 0 {
					t.Fatalf("FailOpen past the limit: %v, %d bypasses; want refused, none", err, len(bypasses))
				}
				return
			}
			var le *admission.LimitError
			if err != nil || len(bypasses) != 1 || bypasses[0].Mode != breaker.Shadow || !errors.As(bypasses[0].Err, &le) {
				t.Fatalf("Shadow past the limit: %v, bypasses %+v; want admitted and one bypass of the limit", err, bypasses)
			}
			if r.Complete(orders, bp, breaker.Success) {
				t.Fatal("the bypass's Success was taken by the closed circuit")
			}
			if s := r.Snapshots()[orders]; s.Failures != 1 {
				t.Fatalf("%d failures after the bypass's Success, want still 1", s.Failures)
			}
			r.Complete(orders, held, breaker.Failure)
			if s := r.Snapshots()[orders]; s.State != breaker.Open {
				t.Fatalf("%v after the second failure, want open", s.State)
			}
		})
	}
}

// The report of a destination shows its adaptive limit; idle eviction keeps a
// destination while its admission control holds a call.
func TestReportShowsTheLimitAndEvictionWaitsForIt(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t, registry.WithClock(clock), registry.WithIdleEviction(time.Minute),
		registry.WithOverride("kafka:orders", limitedTo(10)))
	held, err := r.AcquireN(t.Context(), orders, 3)
	if err != nil {
		t.Fatal(err)
	}
	rep := r.Report()
	if len(rep) != 1 || rep[0].Limit.InFlight != 3 || rep[0].Limit.Limit != 10 {
		t.Fatalf("report %+v, want orders with 3 of 10 in flight under its limit", rep)
	}
	c, _ := r.Circuit(orders)
	c.(*breaker.Breaker).Snapshot() // the circuit itself holds nothing in flight (no MaxInFlight)
	for range 3 {
		clock.Advance(time.Hour)
		r.EvictIdle()
	}
	if _, ok := r.Lookup(orders); !ok {
		t.Fatal("evicted while a call held its admission slot")
	}
	r.Complete(orders, held, breaker.Success)
	for range 3 {
		clock.Advance(time.Hour)
		r.EvictIdle()
	}
	if _, ok := r.Lookup(orders); ok {
		t.Fatal("not evicted once idle")
	}
}

// throttled is a registry with DefaultPolicy on a fake clock, counting calls, and a
// publisher that fails the calls fail says to fail (by their number, from 0).
func throttled(t *testing.T, fail func(i int64) bool) (*registry.Registry, *fakeclock.Clock, transport.Publisher) {
	t.Helper()
	clock := fakeclock.New(t0)
	r, err := registry.New(registry.DefaultPolicy(), registry.WithClock(clock), registry.WithCallCounts())
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	pub := r.Guard(&fakePublisher{fn: func(context.Context, transport.Destination) error {
		if fail(n.Add(1) - 1) {
			return errBroker
		}
		return nil
	}}, classify)
	return r, clock, pub
}

func throttleOf(t *testing.T, r *registry.Registry) admission.ThrottleStats {
	t.Helper()
	for _, c := range r.Report() {
		if c.Destination == orders {
			return c.Throttle
		}
	}
	t.Fatal("no report of kafka:orders")
	return admission.ThrottleStats{}
}

// A brownout under DefaultPolicy: a destination failing 6 calls in 10, fast, is
// neither throttled (it accepts more than a third) nor cut off by its circuit,
// although runs of 5 failures in a row are frequent: while it accepts a useful share,
// its failures are the throttle's to weigh, not the circuit's. (The brownout starts
// after a healthy second: a process that starts in one has no window yet, and is
// judged by its circuit until it has sent MinSent calls.)
func TestBrownoutKeepsTheCircuitClosed(t *testing.T) {
	r, clock, pub := throttled(t, func(i int64) bool { return i >= 320 && i%10 < 6 })
	var made, failed int
	for range 48 { // a healthy second, then 5s, 40 calls per 125ms bucket
		for range 40 {
			made++
			if err := pub.Publish(t.Context(), orders, transport.Message{}); err != nil {
				var re *registry.RejectedError
				if errors.As(err, &re) {
					t.Fatalf("call %d of a 60 %% brownout refused: %v", made, err)
				}
				failed++
			}
		}
		clock.Advance(125 * time.Millisecond)
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Closed {
		t.Fatalf("60 %% brownout: circuit %v, want closed", s.State)
	}
	if c := callsOf(t, r, orders); c.Rejected != 0 || c.Published != uint64(made-failed) {
		t.Fatalf("counts %+v, want no refusal and %d published", c, made-failed)
	}
	if s := throttleOf(t, r); s.RejectProbability != 0 || s.Sent == 0 {
		t.Fatalf("throttle %+v, want sent calls and no refusal", s)
	}
}

// A destination that goes hard down opens its circuit within a few buckets of the
// throttle's window (Window/8), although the window still holds the healthy second
// before: the last bucket, full of failures, says it accepts nothing.
func TestHardDownOpensWithinBuckets(t *testing.T) {
	down := atomic.Bool{}
	r, clock, pub := throttled(t, func(int64) bool { return down.Load() })
	for range 8 { // a healthy second
		for range 20 {
			if err := pub.Publish(t.Context(), orders, transport.Message{}); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(125 * time.Millisecond)
	}
	down.Store(true)
	for step := range 3 {
		for range 20 {
			err := pub.Publish(t.Context(), orders, transport.Message{})
			if !errors.Is(err, errBroker) && !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("call to a dead destination: %v", err)
			}
		}
		if s := r.Snapshots()[orders]; step == 0 && s.State != breaker.Closed {
			t.Fatalf("in the outage's first bucket, with the healthy second in the window: %v, want closed", s.State)
		}
		clock.Advance(125 * time.Millisecond)
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Open {
		t.Fatalf("three buckets hard down: %v, want open", s.State)
	}
}

// A destination that accepts 1 call in 10 keeps its circuit closed, and the throttle
// refuses most calls; a throttle's refusal is a *RejectedError that matches
// admission.ErrThrottled and ErrRefused, and is counted and reported as a refusal.
func TestDeepBrownoutIsThrottled(t *testing.T) {
	r, clock, pub := throttled(t, func(i int64) bool { return i >= 320 && i%10 != 0 })
	var refusals, lastRefusals int
	for step := range 24 { // a healthy second, then two seconds accepting 10 %
		for range 40 {
			err := pub.Publish(t.Context(), orders, transport.Message{})
			var re *registry.RejectedError
			switch {
			case err == nil || errors.Is(err, errBroker):
			case errors.Is(err, admission.ErrThrottled):
				if step >= 16 {
					lastRefusals++
				}
				if !errors.As(err, &re) || !errors.Is(err, admission.ErrRefused) || errors.Is(err, admission.ErrOverLimit) {
					t.Fatalf("throttle refusal %v, want a *RejectedError matching ErrRefused", err)
				}
				refusals++
			default:
				t.Fatalf("call to a destination accepting 10 %%: %v", err)
			}
		}
		clock.Advance(125 * time.Millisecond)
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Closed {
		t.Fatalf("a destination accepting 10 %%: circuit %v, want closed", s.State)
	}
	// At 10 % accepted the throttle refuses about 70 % once the healthy second has
	// left its window.
	if lastRefusals < 8*40/2 {
		t.Fatalf("%d of the last second's 320 calls refused, want most", lastRefusals)
	}
	if c, s := callsOf(t, r, orders), throttleOf(t, r); s.Refused != uint64(refusals) || c.Rejected != uint64(refusals) {
		t.Fatalf("%d throttle refusals: reported %+v, counted %+v", refusals, s, c)
	}
}

// When a probe's success closes the circuit, the throttle forgets the outage: the
// failures that opened the circuit, still in its window, refuse nothing after the
// return.
func TestThrottleForgetsTheOutageWhenTheCircuitCloses(t *testing.T) {
	down := atomic.Bool{}
	r, clock, pub := throttled(t, func(int64) bool { return down.Load() })
	for range 8 { // a healthy second
		for range 20 {
			_ = pub.Publish(t.Context(), orders, transport.Message{})
		}
		clock.Advance(125 * time.Millisecond)
	}
	down.Store(true)
	for step := 0; r.Snapshots()[orders].State != breaker.Open; step++ {
		if step == 16 {
			t.Fatal("two seconds hard down and the circuit is not open")
		}
		for range 40 {
			_ = pub.Publish(t.Context(), orders, transport.Message{})
		}
		clock.Advance(125 * time.Millisecond)
	}
	down.Store(false)
	clock.Advance(610 * time.Millisecond) // past a break (550ms ±10 %), within the window
	if err := pub.Publish(t.Context(), orders, transport.Message{}); err != nil {
		t.Fatalf("the probe after the return: %v", err)
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Closed {
		t.Fatalf("after a successful probe: %v, want closed", s.State)
	}
	if s := throttleOf(t, r); s.RejectProbability != 0 || s.Sent > 1 {
		t.Fatalf("throttle after the return %+v, want the outage forgotten", s)
	}
}

// Once a probe's success closes the circuit, nothing ramps: the first second after
// the return admits calls at the healthy rate and concurrency, refused neither by
// the circuit (DefaultPolicy sets no RampDuration) nor by the limit (which the
// outage's error answers did not contract) nor by the throttle (see
// TestThrottleForgetsTheOutageWhenTheCircuitCloses). A slow first second after an
// up-edge is the client's wait or the probe's, not the policy's.
func TestFullRateRightAfterTheReturn(t *testing.T) {
	down := atomic.Bool{}
	r, clock, _ := throttled(t, func(int64) bool { return false })
	// wave holds n calls in flight at once, then ends them with the destination's
	// verdict, and returns how many were refused.
	wave := func(n int) (refused int) {
		var held []registry.Permit
		for range n {
			p, err := r.Acquire(t.Context(), orders)
			if err != nil {
				refused++
				continue
			}
			held = append(held, p)
		}
		for _, p := range held {
			if down.Load() {
				r.CompleteWith(orders, p, breaker.Failure, errBroker)
			} else {
				r.CompleteWith(orders, p, breaker.Success, nil)
			}
		}
		return refused
	}
	for range 16 { // two healthy seconds, 20 calls in flight every 62.5ms
		if n := wave(20); n != 0 {
			t.Fatalf("healthy: %d of 20 refused", n)
		}
		clock.Advance(62500 * time.Microsecond)
	}
	down.Store(true)
	for step := 0; r.Snapshots()[orders].State != breaker.Open; step++ {
		if step == 32 {
			t.Fatal("two seconds hard down and the circuit is not open")
		}
		wave(20)
		clock.Advance(62500 * time.Microsecond)
	}
	down.Store(false)
	clock.Advance(610 * time.Millisecond) // past the break, the outage's failures still in the window
	if n := wave(1); n != 0 || r.Snapshots()[orders].State != breaker.Closed {
		t.Fatalf("the probe after the return: refused %d, circuit %v; want it admitted and the circuit closed", n, r.Snapshots()[orders].State)
	}
	for step := range 16 {
		if n := wave(20); n != 0 {
			t.Fatalf("%v after the circuit closed: %d of 20 refused, want none", time.Duration(step)*62500*time.Microsecond, n)
		}
		clock.Advance(62500 * time.Microsecond)
	}
}

// Rare traffic is the circuit's to judge: a dead destination called once every 10
// minutes never fills the throttle's window, and opens after DefaultPolicy's 5
// failures.
func TestRareFailuresOpenUnderDefaultPolicy(t *testing.T) {
	r, clock, pub := throttled(t, func(int64) bool { return true })
	for i := range 5 {
		if s := r.Snapshots()[orders]; i > 0 && s.State != breaker.Closed {
			t.Fatalf("after %d rare failures: %v, want closed", i, s.State)
		}
		if err := pub.Publish(t.Context(), orders, transport.Message{}); !errors.Is(err, errBroker) {
			t.Fatalf("call %d: %v, want the broker's failure", i+1, err)
		}
		clock.Advance(10 * time.Minute)
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Open {
		t.Fatalf("after 5 rare failures: %v, want open", s.State)
	}
}

// Only outcomes that say something about the destination feed the throttle: a
// success, a failure and a missed deadline with its budget do; the caller's cancel, a
// message's own rejection and a deadline shorter than MinCallBudget do not.
func TestThrottleIsFedByVerdictsOnly(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		cancel   bool
		err      error // nil: the call waits for its context
		wantSent int64
	}{
		{"success", 0, false, errNone, 1},
		{"broker failure", 0, false, errBroker, 1},
		{"message rejected", 0, false, errBadMsg, 0},
		{"caller cancelled", 0, true, nil, 0},
		{"deadline under MinCallBudget", registry.DefaultMinCallBudget / 2, false, nil, 0},
		{"deadline with its budget", 2 * registry.DefaultMinCallBudget, false, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := registry.New(registry.DefaultPolicy(), registry.WithCallCounts())
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Guard(&fakePublisher{}, classify).Publish(t.Context(), orders, transport.Message{}); err != nil {
					t.Fatal(err) // a success first: the destination is warm (no cold first wave)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.deadline > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				pub := r.Guard(&fakePublisher{fn: func(ctx context.Context, _ transport.Destination) error {
					if tc.cancel {
						cancel()
					}
					if tc.err == nil {
						<-ctx.Done()
						return ctx.Err()
					}
					if tc.err == errNone {
						return nil
					}
					return tc.err
				}}, classify)
				_ = pub.Publish(ctx, orders, transport.Message{})
				if s := throttleOf(t, r); s.Sent != 1+tc.wantSent {
					t.Fatalf("throttle window holds %d sent calls, want %d", s.Sent, 1+tc.wantSent)
				}
			})
		})
	}
}

// errNone marks, in TestThrottleIsFedByVerdictsOnly, a call that succeeds.
var errNone = errors.New("no error")
