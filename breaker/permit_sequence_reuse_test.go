package breaker

import (
	"errors"
	"testing"
	"time"
)

// Every first completion (Complete, CompleteMissed, CompleteWith of a failure with its error)
// moves its token's sequence on, so that when the pool lends the token again a stale
// permit of an earlier lending neither completes the new permit nor takes its
// completion away. Each way is checked after another one, since a sequence moved back
// by one way and on by the other comes round to a value a stale permit holds. The pool
// decides which token a permit gets; the test goes round until it lent the same token
// three times running (nearly always the first round).
func TestCompletionsKeepStalePermitsOffTheNextLending(t *testing.T) {
	ways := []struct {
		name     string
		complete func(Permit) bool
	}{
		{"Complete", func(p Permit) bool { return p.Complete(Success) }},
		{"CompleteWith", func(p Permit) bool { return p.CompleteWith(Failure, errors.New("broker down")) }},
		{"CompleteMissed", func(p Permit) bool { return p.CompleteMissed(nil) }},
	}
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
	for i, first := range ways {
		then := ways[(i+1)%len(ways)]
		lent := false
		for range 1000 {
			z := acquire()
			if !first.complete(z) {
				t.Fatalf("a first %s was not live", first.name)
			}
			a := acquire()
			if !then.complete(a) {
				t.Fatalf("a first %s was not live", then.name)
			}
			next := acquire()
			if z.tok != a.tok || a.tok != next.tok {
				next.Complete(Neutral)
				continue
			}
			lent = true
			if z.Complete(Failure) || a.Complete(Failure) {
				t.Fatalf("%s then %s: a stale permit completed the permit its token was lent to next", first.name, then.name)
			}
			if !next.Complete(Success) {
				t.Fatalf("%s then %s: the token's next permit was not live: a stale permit completed it", first.name, then.name)
			}
			break
		}
		if !lent {
			t.Skipf("%s then %s: the pool never lent one token three times running", first.name, then.name)
		}
	}
}
