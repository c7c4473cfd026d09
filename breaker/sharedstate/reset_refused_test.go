package sharedstate_test

// A reset the store refuses is handled like any refused write (complete.go:
// resetFailures, degraded.go: writeFailed): OnError is told, and under KeepLocal the
// replica keeps its evidence locally (degraded), under FailClosed it refuses calls for
// RetryDelay.

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

var errSa3Refused = errors.New("sa3: OOM command not allowed")

// sa3ResetRefused is a Counter driver whose ResetFailures the store refuses.
type sa3ResetRefused struct {
	*circuittest.MemoryDriver
}

func (sa3ResetRefused) ResetFailures(context.Context, string, sharedstate.Closed) (sharedstate.Record, error) {
	return sharedstate.Record{}, errSa3Refused
}

// After a failure counted in the store, the Success whose reset the store refuses is
// not taken into account, OnError is told the refusal, and the replica is degraded
// (KeepLocal) or refuses the next call (FailClosed).
func TestRefusedResetIsReportedAndKept(t *testing.T) {
	for _, mode := range []sharedstate.StoreFailure{sharedstate.KeepLocal, sharedstate.FailClosed} {
		t.Run(map[sharedstate.StoreFailure]string{sharedstate.KeepLocal: "KeepLocal", sharedstate.FailClosed: "FailClosed"}[mode], func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			var mu sync.Mutex
			var reported []error
			c := ruleCircuit(t, sa3ResetRefused{&circuittest.MemoryDriver{}}, clock, func(cfg *sharedstate.Config) {
				cfg.OnStoreFailure = mode
				cfg.OnError = func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }
			})
			outcome(t, c, breaker.Failure) // counted in the store
			if outcome(t, c, breaker.Success) {
				t.Fatal("a Success whose reset the store refused was taken into account")
			}
			mu.Lock()
			n := len(reported)
			told := n > 0 && errors.Is(reported[n-1], errSa3Refused)
			mu.Unlock()
			if !told {
				t.Fatalf("OnError after a refused reset: %d errors, the last not the refusal; want it told", n)
			}
			switch mode {
			case sharedstate.KeepLocal:
				if s := c.Snapshot(); s.DegradedSince.IsZero() {
					t.Fatalf("Snapshot after a refused reset under KeepLocal: %+v; want degraded", s)
				}
			case sharedstate.FailClosed:
				if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrUnavailable) {
					t.Fatalf("Acquire within RetryDelay of a refused reset under FailClosed: %v; want ErrUnavailable", err)
				}
			}
		})
	}
}
