package registry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

func sqs(name string) transport.Destination { return transport.Destination{Broker: "sqs", Name: name} }

// Without EvictIdle calls, the registry sweeps when a new destination comes and half
// the idle period has passed since the last sweep; a circuit goes at the first sweep
// a whole idle period after the sweep that found it unused. So a circuit idle for one
// period is gone within one and a half, and never before one.
func TestSweepsComeEveryHalfIdlePeriod(t *testing.T) {
	clock := fakeclock.New(t0)
	r, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}},
		registry.WithClock(clock), registry.WithIdleEviction(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	live := func(name string) bool {
		_, ok := r.Lookup(sqs(name))
		return ok
	}
	step := func(at time.Duration, name string) {
		t.Helper()
		clock.Set(t0.Add(at))
		if _, err := r.Circuit(sqs(name)); err != nil {
			t.Fatal(err)
		}
	}
	step(0, "a")
	step(time.Second, "b")    // 1 s since the last sweep: none
	step(5*time.Second, "c")  // half the period: a sweep finds a and b unused since their creation
	step(10*time.Second, "d") // a sweep: a idle for 5 s stays
	step(11*time.Second, "e") // no sweep (1 s after the last)
	if !live("a") {
		t.Fatal("a was evicted 11 s after its creation, 6 s after a sweep first found it idle")
	}
	step(15*time.Second, "f") // a sweep: a idle since the sweep at 5 s
	if live("a") || live("b") {
		t.Fatalf("a and b, unused since the sweep at 5 s, live at 15 s: a %v, b %v", live("a"), live("b"))
	}
	if !live("c") || !live("d") || !live("e") || !live("f") {
		t.Error("a circuit used within the idle period was evicted")
	}
}

// At the cap a new destination sweeps first, however recent the last sweep, so that
// idle circuits make room; it is refused only when none is idle.
func TestANewDestinationAtTheCapSweeps(t *testing.T) {
	clock := fakeclock.New(t0)
	r, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}},
		registry.WithClock(clock), registry.WithIdleEviction(10*time.Second), registry.WithMaxDestinations(2))
	if err != nil {
		t.Fatal(err)
	}
	r.Circuit(sqs("a"))
	r.Circuit(sqs("b"))
	clock.Set(t0.Add(time.Second))
	r.EvictIdle() // a and b unused from 1 s
	clock.Set(t0.Add(9 * time.Second))
	r.EvictIdle() // the last sweep: 2 s before the next destination
	clock.Set(t0.Add(11 * time.Second))
	if _, err := r.Circuit(sqs("c")); err != nil {
		t.Fatalf("a destination at the cap with two circuits idle for 10 s: %v", err)
	}
	r.Circuit(sqs("d"))
	if _, err := r.Circuit(sqs("e")); !errors.Is(err, registry.ErrTooManyDestinations) {
		t.Fatalf("a destination at the cap with none idle: %v, want ErrTooManyDestinations", err)
	}
}

// Without WithIdleEviction, EvictIdle drops nothing, however long a circuit is unused.
func TestEvictIdleWithoutIdleEvictionKeepsEverything(t *testing.T) {
	clock := fakeclock.New(t0)
	r, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}}, registry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	r.Circuit(sqs("a"))
	for range 3 {
		if n := r.EvictIdle(); n != 0 {
			t.Fatalf("EvictIdle dropped %d circuits", n)
		}
		clock.Advance(time.Hour)
	}
	if _, ok := r.Snapshot(sqs("a")); !ok {
		t.Fatal("Snapshot says the live circuit is not live")
	}
}

// A factory's circuit that takes no observers is used as it is when the registry has
// observers: they hear nothing of it, and nothing fails.
func TestObserversWithAFactoryCircuitThatTakesNone(t *testing.T) {
	heard := 0
	r, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, Scope: breaker.SharedDependency}},
		registry.WithObserver(func(transport.Destination, breaker.Transition) { heard++ }),
		registry.WithCircuitFactory(breaker.SharedDependency, func(d transport.Destination, _ breaker.Policy) (breaker.Circuit, error) {
			return breaker.New(d.String(), breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
		}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.Circuit(sqs("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*breaker.Breaker); !ok {
		t.Fatalf("circuit %T, want the factory's", c)
	}
	if heard != 0 {
		t.Errorf("observers heard %d transitions of a circuit that takes no observers", heard)
	}
}

// Total counts every kind of call once.
func TestCallCountsTotal(t *testing.T) {
	c := registry.CallCounts{Published: 1, Failed: 2, Rejected: 4, Neutral: 8}
	if c.Total() != 15 {
		t.Errorf("Total of %+v = %d, want 15", c, c.Total())
	}
}

// untilDeadline is the context of a call whose client retries a refused connection
// until the caller's deadline: far off when the call starts, passed once ended is set.
type untilDeadline struct {
	context.Context
	ended bool
}

func (c *untilDeadline) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }

func (c *untilDeadline) Err() error {
	if c.ended {
		return context.DeadlineExceeded
	}
	return nil
}

// One call every 10 minutes to a destination whose broker refuses connections opens
// its circuit within the default policy's threshold, whether the client gives up at
// once or retries until the caller's deadline, and whether or not idle eviction runs
// in between: an entry whose last call failed is never evicted with its evidence.
func TestRareCallsToADeadBrokerOpenWithinTheThreshold(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	classify := func(err error) breaker.Outcome {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return breaker.Failure
		}
		return breaker.Neutral
	}
	threshold := registry.DefaultPolicy().Circuit.FailureThreshold
	for _, tc := range []struct {
		name     string
		idle     time.Duration // 0: no eviction
		deadline bool          // the client retries until the caller's deadline
	}{
		{"refused at once, no eviction", 0, false},
		{"refused at once, idle eviction 5m", 5 * time.Minute, false},
		{"refused at once, idle eviction 1m", time.Minute, false},
		{"retried until the deadline, no eviction", 0, true},
		{"retried until the deadline, idle eviction 5m", 5 * time.Minute, true},
		{"retried until the deadline, idle eviction 1m", time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(t0)
			opts := []registry.Option{registry.WithClock(clock)}
			if tc.idle > 0 {
				opts = append(opts, registry.WithIdleEviction(tc.idle))
			}
			r, err := registry.New(registry.DefaultPolicy(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			d := sqs("rare")
			open := func() bool {
				c, ok := r.Lookup(d)
				return ok && c.Snapshot().State == breaker.Open
			}
			calls := 0
			for ; calls < 3*threshold && !open(); calls++ {
				ctx := &untilDeadline{Context: t.Context()}
				err := r.Call(ctx, d, 1, classify, func(context.Context) error {
					ctx.ended = tc.deadline
					if tc.deadline {
						return fmt.Errorf("%w (last dial: %w)", context.DeadlineExceeded, refused)
					}
					return refused
				})
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("call %d: %v, want the broker's refusal", calls+1, err)
				}
				for range 10 { // sweeps every minute between the calls
					clock.Advance(time.Minute)
					r.EvictIdle()
				}
			}
			// A lone first call is no start-up wave: it counts, as every later one.
			if !open() || calls > threshold {
				t.Fatalf("%d calls 10 minutes apart left the circuit closed or opened it late (open: %v); want open within %d", calls, open(), threshold)
			}
		})
	}
}
