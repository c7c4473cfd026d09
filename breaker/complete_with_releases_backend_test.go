package breaker

import (
	"errors"
	"runtime"
	"testing"
	"weak"
)

// mb2ErrCompleter is a backend Completer that also takes the call's error.
type mb2ErrCompleter struct{ got []error }

func (c *mb2ErrCompleter) CompletePermit(PermitInfo, Outcome) bool { return true }
func (c *mb2ErrCompleter) CompletePermitWith(_ PermitInfo, _ Outcome, err error) bool {
	c.got = append(c.got, err)
	return true
}

// mb2CompleteWithAndCollect completes a backend permit with an error and returns a
// weak pointer to its backend, which nothing else holds once this returns.
func mb2CompleteWithAndCollect(t *testing.T) weak.Pointer[mb2ErrCompleter] {
	c := &mb2ErrCompleter{}
	p := NewPermit(c, PermitInfo{Generation: 1, Lease: 9})
	if !p.CompleteWith(Failure, errors.New("broker down")) || len(c.got) != 1 {
		t.Fatalf("CompleteWith did not reach the backend with its error: %v", c.got)
	}
	return weak.Make(c)
}

// A completed backend permit gives its token back to the pool without the backend:
// the pool does not keep a Completer (a store, a connection) alive after its last
// permit, also when the permit was completed with its error.
func TestCompleteWithDoesNotKeepTheBackendInThePool(t *testing.T) {
	w := mb2CompleteWithAndCollect(t)
	runtime.GC() // a pooled token survives one collection (the pool's victim cache)
	if w.Value() != nil {
		t.Fatal("the backend is still reachable after its permit completed: a pooled token keeps it")
	}
}
