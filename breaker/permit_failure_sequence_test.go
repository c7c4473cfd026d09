package breaker

import (
	"errors"
	"testing"
	"time"
)

// A failure completed with its error (CompleteWith) moves its token's sequence on
// like any first completion, so that when the pool lends the token again a stale
// permit of an earlier lending neither completes the new permit nor takes its
// completion away. The pool decides which token a permit gets; the test goes round
// until it lent the same token three times running (nearly always the first round).
func TestCompleteWithFailureKeepsStalePermitsOffTheNextLending(t *testing.T) {
	b, err := New("mb3-seq", Policy{FailureThreshold: 1000, BreakDuration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	acquire := func() Permit {
		t.Helper()
		p, err := b.Acquire(t.Context())
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		return p
	}
	for range 1000 {
		z := acquire()
		if !z.Complete(Success) {
			t.Fatal("a first Complete was not live")
		}
		a := acquire()
		if !a.CompleteWith(Failure, errors.New("broker down")) {
			t.Fatal("a first CompleteWith was not live")
		}
		next := acquire()
		if z.tok != a.tok || a.tok != next.tok {
			next.Complete(Neutral)
			continue
		}
		if z.Complete(Failure) {
			t.Fatal("a stale permit completed the permit its token was lent to next")
		}
		if !next.Complete(Success) {
			t.Fatal("the token's next permit was not live: a stale permit completed it")
		}
		return
	}
	t.Skip("the pool never lent one token three times running")
}
