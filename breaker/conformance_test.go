package breaker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// localCircuit gives the local breaker's overrides the suite's signatures.
type localCircuit struct{ *breaker.Breaker }

func (c localCircuit) ForceOpen(_ context.Context, until time.Time) error {
	c.Breaker.ForceOpen(until)
	return nil
}

func (c localCircuit) ForceClose(_ context.Context, until time.Time) error {
	c.Breaker.ForceClose(until)
	return nil
}

func (c localCircuit) ClearOverride(context.Context) error {
	c.Breaker.ClearOverride()
	return nil
}

func TestConformance(t *testing.T) {
	circuittest.Run(t, circuittest.Backend{
		Scope: breaker.LocalProcess,
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				opts := []breaker.Option{breaker.WithClock(cfg.Clock)}
				if cfg.Observer != nil {
					opts = append(opts, breaker.WithObserver(cfg.Observer))
				}
				b, err := breaker.New("conformance", cfg.Policy, opts...)
				if err != nil {
					return nil, err
				}
				return localCircuit{b}, nil
			}
		},
	})
}

// TestModel drives circuits with random outcomes from many goroutines while the clock
// moves, and checks the invariants of the contract throughout.
func TestModel(t *testing.T) {
	policies := map[string]breaker.Policy{
		"consecutive": {FailureThreshold: 3, BreakDuration: 50 * time.Millisecond, HalfOpenMaxProbes: 2, SuccessesToClose: 2,
			ProbeLease: 30 * time.Millisecond, MaxInFlight: 6, Jitter: 0.3, MaxBreakDuration: 400 * time.Millisecond},
		"window": {FailureThreshold: 4, BreakDuration: 20 * time.Millisecond, FailureWindow: 100 * time.Millisecond,
			MinimumCalls: 6, FailureRatio: 0.3, SlowCallDuration: 15 * time.Millisecond, HalfOpenMaxProbes: 3},
		"unbounded": {FailureThreshold: 2, BreakDuration: 10 * time.Millisecond, ProbeLease: 5 * time.Millisecond},
		"ramp": {FailureThreshold: 3, BreakDuration: 10 * time.Millisecond, RampDuration: 40 * time.Millisecond,
			RampAggression: 2, MaxInFlight: 8},
		"ramp-window": {FailureThreshold: 4, BreakDuration: 20 * time.Millisecond, FailureWindow: 100 * time.Millisecond,
			MinimumCalls: 6, RampDuration: 30 * time.Millisecond, RampFloor: 0.3, HalfOpenMaxProbes: 2},
	}
	for name, policy := range policies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runModel(t, policy)
		})
	}
}

type issued struct {
	gen   uint64
	probe bool
}

// rampRefusal is a ramp's refusal seen by a model worker: the clock before and after
// the Acquire, and the NotBefore it was given.
type rampRefusal struct{ before, after, notBefore time.Time }

func runModel(t *testing.T, policy breaker.Policy) {
	clock := fakeclock.New(t0)
	var (
		mu     sync.Mutex
		states = map[uint64]breaker.State{1: breaker.Closed} // generation -> state it started
		last   = breaker.Transition{Generation: 1, To: breaker.Closed}
		closes []time.Time // when the circuit closed from half-open: a ramp starts
	)
	observe := func(tr breaker.Transition) {
		mu.Lock()
		defer mu.Unlock()
		if tr.Generation != last.Generation+1 || tr.From != last.To {
			t.Errorf("transition %+v follows %+v", tr, last)
		}
		last = tr
		states[tr.Generation] = tr.To
		if tr.Reason == breaker.ReasonProbeSucceeded {
			closes = append(closes, tr.At)
		}
	}
	b, err := breaker.New("model", policy, breaker.WithClock(clock), breaker.WithObserver(observe))
	if err != nil {
		t.Fatal(err)
	}
	maxProbes := backend.Normalize(policy).HalfOpenMaxProbes

	check := func() {
		s := b.Snapshot()
		if s.Probes > maxProbes {
			t.Errorf("%d probes in flight, at most %d allowed", s.Probes, maxProbes)
		}
		if s.InFlight < 0 || policy.MaxInFlight > 0 && s.InFlight > policy.MaxInFlight {
			t.Errorf("in flight %d outside [0, %d]", s.InFlight, policy.MaxInFlight)
		}
	}

	const workers, rounds = 12, 2000
	var done atomic.Bool
	var driver sync.WaitGroup
	driver.Go(func() { // checks invariants while the workers run
		for !done.Load() {
			check()
		}
	})
	var wg sync.WaitGroup
	results := make([][]issued, workers)
	refusals := make([][]rampRefusal, workers)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			var held []breaker.Permit
			for range rounds {
				// Time moves with the work, so every run sees many breaks.
				if r.IntN(4) == 0 {
					clock.Advance(time.Duration(r.IntN(2000)) * time.Microsecond)
				}
				before := clock.Now()
				p, err := b.Acquire(context.Background())
				if err == nil {
					results[w] = append(results[w], issued{p.Generation(), p.Probe()})
					held = append(held, p)
				} else if oe, ok := errors.AsType[*breaker.OpenError](err); ok && oe.Ramping {
					refusals[w] = append(refusals[w], rampRefusal{before, clock.Now(), oe.NotBefore})
				}
				// Complete a random number of held permits, in random order.
				for len(held) > 0 && r.IntN(3) > 0 {
					i := r.IntN(len(held))
					p := held[i]
					held = append(held[:i], held[i+1:]...)
					before := b.Snapshot().Generation
					live := p.Complete(breaker.Outcome(r.IntN(4))) // 0..3: all outcomes
					if live && p.Generation() < before {
						t.Errorf("a permit of generation %d counted while generation %d was live", p.Generation(), before)
					}
					if p.Complete(breaker.Success) {
						t.Error("second completion counted")
					}
				}
			}
			for _, p := range held {
				p.Complete(breaker.Neutral)
			}
		})
	}
	wg.Wait()
	done.Store(true)
	driver.Wait()
	check()

	if s := b.Snapshot(); s.InFlight != 0 {
		t.Errorf("in flight %d after every permit completed", s.InFlight)
	}
	mu.Lock()
	defer mu.Unlock()
	var probes, transitions int
	for _, list := range results {
		for _, is := range list {
			want := breaker.Closed
			if is.probe {
				want = breaker.HalfOpen
				probes++
			}
			if got, ok := states[is.gen]; !ok || got != want {
				t.Fatalf("a permit (probe=%v) was issued in generation %d, which is %v", is.probe, is.gen, got)
			}
		}
	}
	transitions = len(states) - 1
	if transitions < 10 || probes == 0 {
		t.Fatalf("the run exercised too little: %d transitions, %d probes", transitions, probes)
	}
	refused := checkRampRefusals(t, policy, closes, refusals)
	if s := b.Snapshot(); s.RampRefused != uint64(refused) {
		t.Errorf("Snapshot counts %d ramp refusals, the workers saw %d", s.RampRefused, refused)
	}
	t.Logf("%d transitions, %d probes, %d ramp refusals", transitions, probes, refused)
}

// checkRampRefusals checks that every ramp refusal came within RampDuration of a close
// from half-open and told its caller to come back within the next eighth of the ramp,
// and returns their number.
func checkRampRefusals(t *testing.T, policy breaker.Policy, closes []time.Time, refusals [][]rampRefusal) (n int) {
	t.Helper()
	for _, list := range refusals {
		for _, r := range list {
			n++
			i, _ := slices.BinarySearchFunc(closes, r.after, func(c, at time.Time) int { return c.Compare(at) })
			if i < len(closes) && closes[i].Equal(r.after) {
				i++
			}
			// closes[i-1] is the last close at or before the Acquire ended.
			if i == 0 || !r.before.Before(closes[i-1].Add(policy.RampDuration)) {
				t.Fatalf("a ramp refusal between %v and %v, outside every ramp", r.before, r.after)
			}
			if !r.notBefore.After(r.before) || r.notBefore.After(r.after.Add(policy.RampDuration/8)) {
				t.Fatalf("ramp refusal at [%v, %v] says come back at %v", r.before, r.after, r.notBefore)
			}
		}
	}
	if policy.RampDuration > 0 && n == 0 {
		t.Fatal("the run saw no ramp refusal")
	}
	return n
}
