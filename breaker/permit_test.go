package breaker_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// nopBackend is a backend that takes every outcome and keeps nothing.
type nopBackend struct{}

func (nopBackend) CompletePermit(backend.PermitInfo, breaker.Outcome) bool { return true }
func (nopBackend) CompletePermitWith(backend.PermitInfo, breaker.Outcome, error) bool {
	return true
}

// Completing a permit gives its token back to the pool whichever way it completes, so
// that a permit costs no allocation: not only Complete's success, but a missed
// deadline and a backend permit's, also a failure with its error. A failure
// with its error on the circuit's own permit allocates only the note it records.
// (AllocsPerRun rounds down: the race detector's pool, which drops a quarter of what
// it is given, stays under one allocation a call.)
func TestPermitCompletionsGiveTheTokenBack(t *testing.T) {
	ctx := context.Background()
	errDown := errors.New("broker down")
	plain := newHarness(t, breaker.Policy{FailureThreshold: 0, BreakDuration: time.Second}).b
	for _, c := range []struct {
		name string
		max  float64
		call func()
	}{
		{"CompleteMissed", 0, func() {
			p, _ := plain.Acquire(ctx)
			p.CompleteMissed(nil)
		}},
		{"backend Complete", 0, func() {
			backend.NewPermit(nopBackend{}, backend.PermitInfo{Generation: 1}).Complete(breaker.Success)
		}},
		{"backend CompleteWith", 0, func() {
			backend.NewPermit(nopBackend{}, backend.PermitInfo{Generation: 1}).CompleteWith(breaker.Failure, errDown)
		}},
		{"CompleteWith", 1, func() {
			p, _ := plain.Acquire(ctx)
			p.CompleteWith(breaker.Failure, errDown)
		}},
	} {
		// Empty the pool first (a collection moves it to the victim cache, the next
		// drops that): tokens other tests left there must not stand in for the ones
		// a completion failed to give back.
		runtime.GC()
		runtime.GC()
		if got := testing.AllocsPerRun(1000, c.call); got > c.max {
			t.Errorf("%s: %v allocations a call, want at most %v", c.name, got, c.max)
		}
	}
}
