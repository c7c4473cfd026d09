package breaker_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/brokerguard/brokerguard/breaker"
)

// mb3CompleteLimitedAndCollect completes backend permits that hold slots of their own
// limiters, and returns weak pointers to the limiters, which nothing else holds once
// this returns. The permits are all made before any completes, so that each has its
// own token.
func mb3CompleteLimitedAndCollect(t *testing.T) []weak.Pointer[breaker.Limiter] {
	var (
		ps []breaker.Permit
		ws []weak.Pointer[breaker.Limiter]
	)
	for range 8 {
		lim := breaker.NewLimiter("mb3-slot", breaker.LocalProcess, breaker.LimitPolicy{Max: 4}, nil)
		slot, err := lim.Acquire(breaker.Request{Weight: 1})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, breaker.NewPermit(mb3NopCompleter{}, breaker.PermitInfo{Generation: 1}).WithSlot(slot))
		ws = append(ws, weak.Make(lim))
	}
	for i, p := range ps {
		if !p.Complete(breaker.Success) || ws[i].Value().Stats().InFlight != 0 {
			t.Fatalf("permit %d: its completion did not give the slot back", i)
		}
	}
	return ws
}

// A completed permit gives its limit slot back and its token forgets it: the pool
// does not keep a Limiter (and what it belongs to) alive after its last permit.
func TestCompletedLimitedPermitDoesNotKeepTheLimiterInThePool(t *testing.T) {
	ws := mb3CompleteLimitedAndCollect(t)
	runtime.GC() // a pooled token survives one collection (the pool's victim cache)
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("limiter %d is still reachable after its permit completed: a pooled token keeps it", i)
		}
	}
}
