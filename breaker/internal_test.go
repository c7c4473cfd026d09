package breaker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// On the system clock an open circuit refuses without the lock only before its
// deadline: a call at or after it goes on to become the half-open probe.
func TestInlineOpenRefusalEndsAtTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		epoch func(b *Breaker) // where the breaker's clock starts
		until func() time.Time // the ForceOpen's deadline
	}{
		// A hold whose end has already passed: the deadline is the epoch itself.
		{"after", func(*Breaker) {}, func() time.Time { return time.Now().Add(-time.Hour) }},
		// The system clock cannot be stopped at the deadline, so the epoch is put so
		// far back (no monotonic reading) that the clock's reading and the deadline
		// both saturate at the largest Duration: the call comes exactly at it.
		{"at", func(b *Breaker) { b.epoch = time.Time{} }, func() time.Time { return time.Now().Add(time.Hour) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New("system", Policy{FailureThreshold: 1, BreakDuration: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			tc.epoch(b)
			b.ForceOpen(tc.until())
			if tc.name == "at" {
				if d := b.cur.Load().deadline; d != int64(time.Since(b.epoch)) {
					t.Fatalf("deadline %d is not the clock's reading %d", d, int64(time.Since(b.epoch)))
				}
			}
			p, err := b.Acquire(context.Background())
			if err != nil {
				t.Fatalf("Acquire at the end of the hold: %v, want the probe", err)
			}
			if b.State() != HalfOpen || p.Bypass() {
				t.Fatalf("state %v (bypass %v) after the hold ended, want the half-open probe", b.State(), p.Bypass())
			}
		})
	}
}

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
	b, err := New("sequence", Policy{FailureThreshold: 1000, BreakDuration: time.Second})
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

// A windowed completion that finds the circuit moved to a new phase between
// complete's check and taking the lock counts nowhere: Complete reports false and the
// new phase's window stays empty.
func TestWindowedOutcomeAfterAPhaseChangeCountsNowhere(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b, err := New("test", Policy{FailureThreshold: 1, BreakDuration: time.Minute, FailureWindow: time.Minute}, WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	before := b.cur.Load()
	ran := 0
	testHookRecordWindow = func() {
		ran++
		// Another caller ends a hold in between: a fresh closed phase.
		b.ForceClose(clock.Now().Add(time.Hour))
		b.ClearOverride()
	}
	t.Cleanup(func() { testHookRecordWindow = nil })
	if p.Complete(Failure) {
		t.Error("Complete of a permit whose phase ended under it returned true")
	}
	testHookRecordWindow = nil
	if ran != 1 {
		t.Fatalf("the hook ran %d times, want 1", ran)
	}
	if b.cur.Load() == before {
		t.Fatal("the hook did not change the phase")
	}
	if s := b.Snapshot(); s.State != Closed || s.Failures != 0 {
		t.Fatalf("snapshot %+v; want closed with no failure: the failure of the ended phase counted", s)
	}
}

// WithRandom is withRandom, for the tests of package breaker_test: a source of
// numbers in [0, 1) that makes jitter and ramps repeatable.
var WithRandom = withRandom
