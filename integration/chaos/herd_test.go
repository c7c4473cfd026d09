// Package chaos shows that nothing is lost under faults, load and bad input: broker
// outages, dispatcher crashes, recovery herds and malformed input. `make chaos` runs it.
package chaos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

const (
	replicas  = 100 // local breakers, one per simulated replica
	perBreak  = 100 // goroutines per breaker: 10,000 in all
	breakTime = time.Second
)

// herd opens one breaker per replica at t0 and returns them with their shared clock.
func herd(t *testing.T, p breaker.Policy) ([]*breaker.Breaker, *fakeclock.Clock, time.Time) {
	t.Helper()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := fakeclock.New(t0)
	bs := make([]*breaker.Breaker, replicas)
	for i := range bs {
		b, err := breaker.New(fmt.Sprint("replica-", i), p, breaker.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		pm, _ := b.Acquire(context.Background())
		pm.Complete(breaker.Failure)
		if b.State() != breaker.Open {
			t.Fatal("breaker did not open")
		}
		bs[i] = b
	}
	return bs, clock, t0
}

// release lets every goroutine of every breaker call Acquire once per step, advancing
// the clock before each step, and records for each breaker the probes it admitted and
// when. Probes are held, never completed: a second probe would be a herd.
func release(t *testing.T, bs []*breaker.Breaker, clock *fakeclock.Clock, steps int, step time.Duration) (probes []int, firstProbe []time.Time) {
	probes = make([]int, len(bs))
	firstProbe = make([]time.Time, len(bs))
	var mu sync.Mutex
	var admitted atomic.Int64
	for s := range steps {
		now := clock.Advance(step)
		if s == 0 {
			now = clock.Now()
		}
		var start sync.WaitGroup
		start.Add(1)
		var wg sync.WaitGroup
		for i, b := range bs {
			for range perBreak {
				wg.Go(func() {
					start.Wait() // all 10,000 released at once
					p, err := b.Acquire(context.Background())
					if err != nil {
						return
					}
					admitted.Add(1)
					if !p.Probe() {
						t.Errorf("replica %d admitted a call that is not a probe", i)
					}
					mu.Lock()
					probes[i]++
					if firstProbe[i].IsZero() {
						firstProbe[i] = now
					}
					mu.Unlock()
				})
			}
		}
		start.Done()
		wg.Wait()
	}
	return probes, firstProbe
}

func TestRecoveryHerdGetsExactlyOneProbePerBreaker(t *testing.T) {
	bs, clock, t0 := herd(t, breaker.Policy{FailureThreshold: 1, BreakDuration: breakTime})
	clock.Set(t0.Add(breakTime)) // the instant every circuit may half-open
	probes, _ := release(t, bs, clock, 1, 0)
	for i, n := range probes {
		if n != 1 {
			t.Errorf("replica %d admitted %d probes, want exactly 1", i, n)
		}
	}
	record(result{"recovery herd: 10,000 calls on 100 breakers (probes admitted)", replicas * perBreak, sum(probes), 0, 0, 0})
}

func sum(ns []int) (s int) {
	for _, n := range ns {
		s += n
	}
	return s
}

func TestJitterSpreadsTheFleetsProbes(t *testing.T) {
	const jitter = 0.2
	bs, clock, t0 := herd(t, breaker.Policy{FailureThreshold: 1, BreakDuration: breakTime, Jitter: jitter})
	lo := t0.Add(breakTime - time.Duration(jitter*float64(breakTime)))
	span := time.Duration(2 * jitter * float64(breakTime))
	clock.Set(lo)
	const steps = 50
	probes, first := release(t, bs, clock, steps+1, span/steps)
	var earliest, latest time.Time
	for i, n := range probes {
		if n != 1 {
			t.Fatalf("replica %d admitted %d probes, want exactly 1", i, n)
		}
		if earliest.IsZero() || first[i].Before(earliest) {
			earliest = first[i]
		}
		if first[i].After(latest) {
			latest = first[i]
		}
	}
	spread := float64(latest.Sub(earliest)) / float64(span)
	t.Logf("probe times spread over %.0f%% of the jitter range %v", 100*spread, span)
	if spread < 0.4 {
		t.Fatalf("probes spread over %.0f%% of the jitter range, want at least 40%%", 100*spread)
	}
}
