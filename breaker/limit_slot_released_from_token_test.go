package breaker

import (
	"runtime"
	"testing"
	"weak"
)

// mb4NopCompleter is a backend Completer that takes every outcome. (It holds a
// pointer, so that it is not a tiny allocation: one of those lives as long as its
// neighbours in a shared block, and a weak pointer would not show it collected.)
type mb4NopCompleter struct{ calls *int }

func (c mb4NopCompleter) CompletePermit(PermitInfo, Outcome) bool {
	*c.calls++
	return true
}

// mb4CompleteLimitedAndCollect makes a backend permit holding a slot of its own
// Limiter, completes it, and returns a weak pointer to the Limiter, which nothing
// else holds once this returns.
func mb4CompleteLimitedAndCollect(t *testing.T) weak.Pointer[Limiter] {
	lim := NewLimiter("mb4-slot", LocalProcess, LimitPolicy{Max: 4}, nil)
	slot, err := lim.Acquire(Request{Weight: 1})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	calls := 0
	p := NewPermit(mb4NopCompleter{calls: &calls}, PermitInfo{Generation: 1}).WithSlot(slot)
	if !p.Complete(Success) || calls != 1 {
		t.Fatalf("Complete did not reach the backend once (%d calls)", calls)
	}
	if n := lim.inFlight.Load(); n != 0 {
		t.Fatalf("the slot was not given back: %d in flight", n)
	}
	return weak.Make(lim)
}

// A completed limited permit gives its token back to the pool without its slot: the
// pool does not keep a Limiter (and, through it, a backend's circuit) alive after the
// last permit that held part of it.
func TestCompletedLimitedPermitDoesNotKeepTheLimiterInThePool(t *testing.T) {
	w := mb4CompleteLimitedAndCollect(t)
	runtime.GC() // a pooled token survives one collection (the pool's victim cache)
	if w.Value() != nil {
		t.Fatal("the Limiter is still reachable after its last permit completed: a pooled token keeps its slot")
	}
}
