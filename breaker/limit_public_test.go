package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// brkLimiter is a Limiter on a fake clock, with helpers that take and give back slots.
type brkLimiter struct {
	t     *testing.T
	clock *fakeclock.Clock
	lim   *breaker.Limiter
}

func newBrkLimiter(t *testing.T, p breaker.LimitPolicy) *brkLimiter {
	clock := fakeclock.New(t0)
	lim := breaker.NewLimiter("limited", breaker.LocalProcess, p, clock)
	if lim == nil {
		t.Fatalf("NewLimiter(%+v) = nil", p)
	}
	return &brkLimiter{t: t, clock: clock, lim: lim}
}

func (l *brkLimiter) take(w int, pr breaker.Priority) breaker.LimitSlot {
	l.t.Helper()
	s, err := l.lim.Acquire(breaker.Request{Weight: w, Priority: pr})
	if err != nil {
		l.t.Fatalf("Acquire(%d, %v): %v", w, pr, err)
	}
	return s
}

// A limit turned off is no Limiter; without a clock one reads the system clock; the
// priorities have names.
func TestLimiterWithoutAClockAndPriorityNames(t *testing.T) {
	if l := breaker.NewLimiter("off", breaker.LocalProcess, breaker.LimitPolicy{}, nil); l != nil {
		t.Fatal("NewLimiter of a limit turned off is not nil")
	}
	l := breaker.NewLimiter("system", breaker.LocalProcess, breaker.LimitPolicy{Max: 3}, nil)
	s, err := l.Acquire(breaker.Request{Weight: 2})
	if err != nil || l.Stats().InFlight != 2 {
		t.Fatalf("Acquire: %v, in flight %d, want 2", err, l.Stats().InFlight)
	}
	l.Release(s, breaker.Success, false)
	if l.Cold() || l.Stats().InFlight != 0 {
		t.Fatalf("after a success: cold %v, in flight %d", l.Cold(), l.Stats().InFlight)
	}
	if breaker.Online.String() != "online" || breaker.Bulk.String() != "bulk" {
		t.Fatalf("priorities named %q and %q", breaker.Online, breaker.Bulk)
	}
}

// Busy blames a deadline on this process's bulk work only while the dependency
// answers (a success within the last second) and bulk work is in flight or ended at
// most a second ago.
func TestLimiterBusyNeedsAnAnswerAndRecentBulkWork(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 10, BulkShare: 0.5})
	l.clock.Advance(time.Second)
	bulk := l.take(2, breaker.Bulk)
	if l.lim.Busy() {
		t.Fatal("busy before the dependency answered anything")
	}
	online := l.take(1, breaker.Online)
	l.lim.Release(online, breaker.Success, false)
	if !l.lim.Busy() {
		t.Fatal("not busy with bulk work in flight and an answer")
	}
	l.lim.Release(bulk, breaker.Neutral, false) // bulk work ends now
	l.clock.Advance(500 * time.Millisecond)
	l.lim.Release(l.take(1, breaker.Online), breaker.Success, false)
	l.clock.Advance(500 * time.Millisecond)
	if !l.lim.Busy() {
		t.Fatal("not busy a second after bulk work ended")
	}
	l.clock.Advance(1)
	if l.lim.Busy() || !l.lim.Answered() {
		t.Fatalf("a second and 1ns after bulk work ended: busy %v answered %v, want false true", l.lim.Busy(), l.lim.Answered())
	}

	quiet := newBrkLimiter(t, breaker.LimitPolicy{Max: 10, BulkShare: 0.5})
	quiet.clock.Advance(time.Second)
	quiet.lim.Release(quiet.take(1, breaker.Online), breaker.Success, false)
	if quiet.lim.Busy() {
		t.Fatal("busy without any bulk work")
	}
}

// The bulk headroom is the bulk budget less the bulk work in flight.
func TestLimiterBulkHeadroomShrinksByBulkInFlight(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 10, BulkShare: 0.5})
	if got := l.lim.BulkHeadroom(); got != 5 {
		t.Fatalf("idle headroom %d, want 5", got)
	}
	s := l.take(2, breaker.Bulk)
	if got := l.lim.BulkHeadroom(); got != 3 {
		t.Fatalf("headroom with 2 bulk in flight %d, want 3", got)
	}
	l.lim.Release(s, breaker.Neutral, false)
	if got := l.lim.BulkHeadroom(); got != 5 {
		t.Fatalf("headroom after the release %d, want 5", got)
	}
}

// BaselineSince is the fake clock's time of the update that learned the baseline.
func TestLimiterBaselineSinceReadsTheLimitersClock(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	if _, ok := l.lim.BaselineSince(); ok {
		t.Fatal("a baseline before any call")
	}
	var learned time.Time
	for range 5 {
		var slots []breaker.LimitSlot
		for range 4 {
			slots = append(slots, l.take(1, breaker.Online))
		}
		now := l.clock.Advance(100 * time.Millisecond)
		for _, s := range slots {
			l.lim.Release(s, breaker.Success, false)
		}
		if _, ok := l.lim.BaselineSince(); ok && learned.IsZero() {
			learned = now
		}
	}
	at, ok := l.lim.BaselineSince()
	if !ok || learned.IsZero() || !at.Equal(learned) {
		t.Fatalf("BaselineSince = %v, %v; want %v, true", at, ok, learned)
	}
}

// A call the adaptive limit admits but MaxInFlight refuses gives its slot of the limit
// back at once and is refused with ErrSaturated.
func TestLimitSlotGoesBackWhenMaxInFlightRefuses(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, MaxInFlight: 1,
		Limit: breaker.LimitPolicy{Max: 10}})
	first, err := h.b.AcquireRequest(t.Context(), breaker.Request{Weight: 2})
	if err != nil {
		t.Fatal(err)
	}
	lim := h.b.Limiter()
	for range 3 {
		if _, err := h.b.AcquireRequest(t.Context(), breaker.Request{Weight: 3}); !errors.Is(err, breaker.ErrSaturated) {
			t.Fatalf("second call: %v, want ErrSaturated", err)
		}
	}
	if got := lim.Stats().InFlight; got != 2 {
		t.Fatalf("limit in flight %d after the refusals, want the first call's 2", got)
	}
	first.Complete(breaker.Success)
	if got := lim.Stats().InFlight; got != 0 {
		t.Fatalf("limit in flight %d after the completion, want 0", got)
	}
}

// A refusal's NotBefore is now plus the hint (a Window before the baseline exists),
// rounded up to the millisecond; refusals within one millisecond share one error, per
// priority, and each says which kind of call it refused.
func TestLimitRefusalNotBeforeRoundsUpAndIsShared(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 1, BulkShare: 1, Window: 100 * time.Millisecond})
	l.take(1, breaker.Online)
	l.clock.Advance(1500 * time.Microsecond)
	refuse := func(pr breaker.Priority) *breaker.LimitError {
		t.Helper()
		_, err := l.lim.Acquire(breaker.Request{Priority: pr})
		var le *breaker.LimitError
		if !errors.As(err, &le) || !errors.Is(err, breaker.ErrSaturated) || le.Bulk != (pr == breaker.Bulk) {
			t.Fatalf("%v call over the limit: %v, want a *LimitError", pr, err)
		}
		return le
	}
	first := refuse(breaker.Online)
	if want := t0.Add(102 * time.Millisecond); !first.NotBefore.Equal(want) || first.Identity != "limited" {
		t.Fatalf("NotBefore %v (identity %q), want %v", first.NotBefore, first.Identity, want)
	}
	if want := "breaker: over the adaptive limit: limited (retry after 2026-01-02T03:04:05.102Z)"; first.Error() != want {
		t.Fatalf("message %q, want %q", first.Error(), want)
	}
	l.clock.Advance(500 * time.Microsecond) // 2ms: the same millisecond slot
	if again := refuse(breaker.Online); again != first {
		t.Fatal("a refusal in the same slot built a new error")
	}
	bulk := refuse(breaker.Bulk)
	if bulk == first || !bulk.NotBefore.Equal(first.NotBefore) {
		t.Fatalf("bulk refusal %+v, want its own error with the same NotBefore", bulk)
	}
	if want := "breaker: over the adaptive limit for bulk work: limited (retry after 2026-01-02T03:04:05.102Z)"; bulk.Error() != want {
		t.Fatalf("bulk message %q, want %q", bulk.Error(), want)
	}
	l.clock.Advance(1)
	if later := refuse(breaker.Online); later == first || !later.NotBefore.Equal(t0.Add(103*time.Millisecond)) {
		t.Fatalf("a refusal in the next slot: NotBefore %v, want a new error at +103ms", later.NotBefore)
	}
	if got := l.lim.Stats().Refused; got != 4 {
		t.Fatalf("Refused %d, want 4", got)
	}
}

// A bulk call heavier than the bulk budget is admitted when it is the only bulk call
// (a batch never waits forever); a second one beside it is refused.
func TestLimiterAdmitsALoneHeavyBulkCall(t *testing.T) {
	l := newBrkLimiter(t, breaker.LimitPolicy{Max: 10, BulkShare: 0.5})
	l.take(8, breaker.Bulk)
	if _, err := l.lim.Acquire(breaker.Request{Weight: 1, Priority: breaker.Bulk}); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("a second bulk call beside 8 of a budget of 5: %v, want refused", err)
	}
	if got := l.lim.Stats().BulkInFlight; got != 8 {
		t.Fatalf("%d bulk messages in flight, want 8", got)
	}
}
