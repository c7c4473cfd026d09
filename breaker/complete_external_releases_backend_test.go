package breaker

import (
	"runtime"
	"testing"
	"weak"
)

// mb3Completer is a backend Completer that keeps the outcomes it was given. (It holds
// a pointer, so that it is not a tiny allocation: one of those lives as long as its
// neighbours in a shared block, and a weak pointer would not show it collected.)
type mb3Completer struct{ got []Outcome }

func (c *mb3Completer) CompletePermit(_ PermitInfo, o Outcome) bool {
	c.got = append(c.got, o)
	return true
}

// mb3CompleteAndCollect makes backend permits, then completes them in every way that
// reaches the backend's CompletePermit (Complete, CompleteMissed, CompleteWith without an
// error), and returns weak pointers to their backends, which nothing else holds once
// this returns. The permits are all made before any completes, so that each has its
// own token (a token lent again gets the next backend, which would hide the last).
func mb3CompleteAndCollect(t *testing.T) []weak.Pointer[mb3Completer] {
	complete := []func(Permit) bool{
		func(p Permit) bool { return p.Complete(Success) },
		func(p Permit) bool { return p.Complete(Failure) },
		func(p Permit) bool { return p.CompleteMissed(nil) },
		func(p Permit) bool { return p.CompleteWith(Success, nil) },
		func(p Permit) bool { return p.CompleteWith(Failure, nil) },
	}
	var (
		cs []*mb3Completer
		ps []Permit
		ws []weak.Pointer[mb3Completer]
	)
	for i := range 2 * len(complete) {
		c := &mb3Completer{}
		cs, ps = append(cs, c), append(ps, NewPermit(c, PermitInfo{Generation: 1, Lease: uint64(i)}))
		ws = append(ws, weak.Make(c))
	}
	for i, p := range ps {
		if !complete[i%len(complete)](p) || len(cs[i].got) != 1 {
			t.Fatalf("completion %d did not reach the backend once: %v", i, cs[i].got)
		}
	}
	return ws
}

// A completed backend permit gives its token back to the pool without the backend,
// whichever way it was completed: the pool does not keep a Completer (a store, a
// connection) alive after its last permit.
func TestCompletedBackendPermitDoesNotKeepTheBackendInThePool(t *testing.T) {
	ws := mb3CompleteAndCollect(t)
	runtime.GC() // a pooled token survives one collection (the pool's victim cache)
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("backend %d is still reachable after its permit completed: a pooled token keeps it", i)
		}
	}
}
