package admission_test

import (
	"errors"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// limiter is a Limiter on a fake clock, with helpers that take and give back slots.
type limiter struct {
	t     *testing.T
	clock *fakeclock.Clock
	lim   *admission.Limiter
}

func newLimiter(t *testing.T, p admission.LimitPolicy) *limiter {
	t.Helper()
	clock := fakeclock.New(t0)
	lim := admission.NewLimiter(p, clock.Now)
	if lim == nil {
		t.Fatalf("NewLimiter(%+v) = nil", p)
	}
	return &limiter{t: t, clock: clock, lim: lim}
}

// ready returns a limiter of policy p whose baseline was learned in its first window:
// n online successes of the given latency, then one more at the end of the Window.
func ready(t *testing.T, p admission.LimitPolicy, n int, latency time.Duration) *limiter {
	t.Helper()
	l := newLimiter(t, p)
	l.calls(n, latency, admission.Success)
	l.clock.Advance(p.Window - latency)
	l.calls(1, latency, admission.Success)
	return l
}

func (l *limiter) take(w int, pr admission.Priority) admission.Slot {
	l.t.Helper()
	s, err := l.lim.Acquire(w, pr)
	if err != nil {
		l.t.Fatalf("Acquire(%d, %v): %v", w, pr, err)
	}
	return s
}

func (l *limiter) takeN(n int, pr admission.Priority) []admission.Slot {
	l.t.Helper()
	slots := make([]admission.Slot, n)
	for i := range slots {
		slots[i] = l.take(1, pr)
	}
	return slots
}

func release(slots []admission.Slot, r admission.Result) {
	for _, s := range slots {
		s.Release(r)
	}
}

// calls takes n online slots now, lets latency pass, and gives them back with r.
func (l *limiter) calls(n int, latency time.Duration, r admission.Result) {
	l.t.Helper()
	slots := l.takeN(n, admission.Online)
	l.clock.Advance(latency)
	release(slots, r)
}

// round asks for n calls of weight w and priority pr at once, lets latency pass and
// releases the admitted ones with r. It returns how many the limit refused.
func (l *limiter) round(n, w int, pr admission.Priority, latency time.Duration, r admission.Result) int {
	l.t.Helper()
	var slots []admission.Slot
	refused := 0
	for range n {
		s, err := l.lim.Acquire(w, pr)
		if err != nil {
			if !errors.Is(err, admission.ErrOverLimit) {
				l.t.Fatalf("Acquire: %v, want a refusal by the limit", err)
			}
			refused++
			continue
		}
		slots = append(slots, s)
	}
	l.clock.Advance(latency)
	release(slots, r)
	return refused
}

func (l *limiter) stats() admission.LimitStats { return l.lim.Stats() }

func (l *limiter) wantLimit(want int) {
	l.t.Helper()
	if got := l.lim.Stats().Limit; got != want {
		l.t.Fatalf("limit %d, want %d", got, want)
	}
}

func (l *limiter) wantBulkLimit(want int) {
	l.t.Helper()
	if got := l.lim.Stats().BulkLimit; got != want {
		l.t.Fatalf("bulk limit %d, want %d", got, want)
	}
}

// refusal asks for a call of weight w and priority pr and returns the limit's refusal.
func (l *limiter) refusal(w int, pr admission.Priority) *admission.LimitError {
	l.t.Helper()
	_, err := l.lim.Acquire(w, pr)
	var le *admission.LimitError
	if !errors.As(err, &le) || !errors.Is(err, admission.ErrOverLimit) || !errors.Is(err, admission.ErrRefused) || errors.Is(err, admission.ErrThrottled) || le.Bulk != (pr == admission.Bulk) {
		l.t.Fatalf("%v call of %d over the limit: %v, want a %v *LimitError", pr, w, err, pr)
	}
	return le
}

func TestLimitRefusesAtOnceAndAdmitsALoneHeavyCall(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 10})
	big := l.take(50, admission.Online) // heavier than the limit, on an idle destination: alone
	if le := l.refusal(1, admission.Online); !le.NotBefore.After(l.clock.Now()) {
		t.Fatalf("refusal %+v: want NotBefore after now", le)
	}
	big.Release(admission.Success)
	a := l.take(6, admission.Online)
	l.refusal(5, admission.Online) // 6+5 of 10
	l.take(4, admission.Online)    // 6+4 of 10
	if s := l.stats(); s.InFlight != 10 || s.Refused != 2 {
		t.Fatalf("stats %+v, want 10 in flight and 2 refused", s)
	}
	a.Release(admission.Success)
	if got := l.stats().InFlight; got != 4 {
		t.Fatalf("in flight after a release: %d, want 4", got)
	}
}

// Every result gives the slot back, once: a second Release of the slot, or of a copy,
// and a Release of the zero Slot change nothing.
func TestSlotReleasesOnceWhateverTheResult(t *testing.T) {
	for _, r := range []admission.Result{admission.Success, admission.Failure, admission.Dropped, admission.Ignored} {
		t.Run(r.String(), func(t *testing.T) {
			l := newLimiter(t, admission.LimitPolicy{Max: 10})
			s := l.take(3, admission.Bulk)
			l.take(2, admission.Online)
			copied := s
			if !s.Release(r) || s.Release(r) || copied.Release(admission.Success) {
				t.Fatal("Release: want true once, then false")
			}
			if st := l.stats(); st.InFlight != 2 || st.BulkInFlight != 0 {
				t.Fatalf("after the release: %+v, want the online 2 in flight and no bulk", st)
			}
		})
	}
	if (admission.Slot{}).Release(admission.Success) {
		t.Fatal("the zero Slot released something")
	}
}

// releaseAndCollect releases slots of limiters nothing else holds, and returns weak
// pointers to the limiters. The slots are all taken before any is released, so that
// each has its own token.
func releaseAndCollect(t *testing.T) []weak.Pointer[admission.Limiter] {
	var (
		slots []admission.Slot
		ws    []weak.Pointer[admission.Limiter]
	)
	for range 8 {
		lim := admission.NewLimiter(admission.LimitPolicy{Max: 4}, nil)
		s, err := lim.Acquire(1, admission.Online)
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
		ws = append(ws, weak.Make(lim))
	}
	for i, s := range slots {
		if !s.Release(admission.Success) || ws[i].Value().Stats().InFlight != 0 {
			t.Fatalf("slot %d was not given back", i)
		}
	}
	return ws
}

// A released slot's token forgets its limiter: the pool does not keep a Limiter (and
// what it belongs to) alive after its last slot.
func TestReleasedSlotDoesNotKeepTheLimiterInThePool(t *testing.T) {
	ws := releaseAndCollect(t)
	runtime.GC() // a pooled token survives one collection (the pool's victim cache)
	for i, w := range ws {
		if w.Value() != nil {
			t.Fatalf("limiter %d is still reachable after its slot was released: a pooled token keeps it", i)
		}
	}
}

// A refusal's NotBefore is now plus the hint (a Window before the baseline exists),
// rounded up to the millisecond; refusals within one millisecond share one error, per
// priority, and each says which kind of call it refused.
func TestLimitRefusalNotBeforeRoundsUpAndIsShared(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 1, BulkShare: 1, Window: 100 * time.Millisecond})
	l.take(1, admission.Online)
	l.clock.Advance(1500 * time.Microsecond)
	first := l.refusal(1, admission.Online)
	if want := t0.Add(102 * time.Millisecond); !first.NotBefore.Equal(want) {
		t.Fatalf("NotBefore %v, want %v", first.NotBefore, want)
	}
	if want := "admission: over the adaptive limit (retry after 2026-01-02T03:04:05.102Z)"; first.Error() != want {
		t.Fatalf("message %q, want %q", first.Error(), want)
	}
	l.clock.Advance(500 * time.Microsecond) // 2ms: the same millisecond slot
	if again := l.refusal(1, admission.Online); again != first {
		t.Fatal("a refusal in the same slot built a new error")
	}
	bulk := l.refusal(1, admission.Bulk)
	if bulk == first || !bulk.NotBefore.Equal(first.NotBefore) {
		t.Fatalf("bulk refusal %+v, want its own error with the same NotBefore", bulk)
	}
	if want := "admission: over the adaptive limit for bulk work (retry after 2026-01-02T03:04:05.102Z)"; bulk.Error() != want {
		t.Fatalf("bulk message %q, want %q", bulk.Error(), want)
	}
	l.clock.Advance(1)
	if later := l.refusal(1, admission.Online); later == first || !later.NotBefore.Equal(t0.Add(103*time.Millisecond)) {
		t.Fatalf("a refusal in the next slot: NotBefore %v, want a new error at +103ms", later.NotBefore)
	}
	if got := l.stats().Refused; got != 4 {
		t.Fatalf("Refused %d, want 4", got)
	}
}

// A Limiter on the system clock (NewLimiter with no clock) counts time from when it
// was made: a refusal's NotBefore lies after the refused call began and at most the
// retry hint (the Window, before a baseline) and a millisecond's rounding after it
// returned. No test here waits.
func TestLimiterOnTheSystemClockRefusesUntilAfterNow(t *testing.T) {
	l := admission.NewLimiter(admission.LimitPolicy{Max: 1, Window: time.Second}, nil)
	if _, err := l.Acquire(1, admission.Online); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	_, err := l.Acquire(1, admission.Online)
	after := time.Now()
	var le *admission.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("a call past a full limit: %v, want a *LimitError", err)
	}
	if le.NotBefore.Before(before) || le.NotBefore.After(after.Add(time.Second+time.Millisecond)) {
		t.Fatalf("NotBefore %v, want within [%v, %v]", le.NotBefore, before, after.Add(time.Second+time.Millisecond))
	}
}

// A window of the limit closes (and the limit moves) at the first release at least
// Window after it opened once it holds 4 releases with a verdict, or at the first one
// at least 10 Windows after it opened however few it holds.
func TestLimitWindowClosesAtItsExactBounds(t *testing.T) {
	p := admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}
	t.Run("one Window with 4 releases", func(t *testing.T) {
		l := newLimiter(t, p)
		l.calls(4, 100*time.Millisecond-1, admission.Failure)
		l.wantLimit(100)
		l.calls(1, 1, admission.Failure) // 5 failures of 5: halve
		l.wantLimit(50)
	})
	t.Run("the fourth release", func(t *testing.T) {
		l := newLimiter(t, p)
		slots := l.takeN(4, admission.Online)
		l.clock.Advance(100 * time.Millisecond)
		release(slots[:3], admission.Failure)
		l.wantLimit(100)
		slots[3].Release(admission.Failure)
		l.wantLimit(50)
	})
	t.Run("ten Windows with fewer", func(t *testing.T) {
		l := newLimiter(t, p)
		a, b := l.take(1, admission.Online), l.take(1, admission.Online)
		l.clock.Advance(time.Second - 1)
		a.Release(admission.Failure)
		l.wantLimit(100)
		l.clock.Advance(1)
		b.Release(admission.Failure)
		l.wantLimit(50)
	})
}

// Drops (Dropped and Failure alike) contract the limit in proportion to their share
// of the window's releases (half of it when all of them were drops), never below Min;
// Ignored releases are no verdict; a window of answers while the limit is used at
// least half explores back up by its square root.
func TestLimitDropsContractByTheirShareAndAnswersExploreBack(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	slots := l.takeN(6, admission.Online)
	l.clock.Advance(100 * time.Millisecond)
	slots[0].Release(admission.Dropped)
	slots[1].Release(admission.Ignored)
	slots[2].Release(admission.Ignored)
	release(slots[3:], admission.Success)
	l.wantLimit(87) // 100 * (1 - 0.5*1/4): the ignored two are not counted
	l.calls(21, 100*time.Millisecond, admission.Success)
	l.wantLimit(87) // 21 in flight is less than half of 87.5: no exploring
	l.calls(44, 100*time.Millisecond, admission.Success)
	l.wantLimit(96) // 87.5 + sqrt(87.5)

	floor := newLimiter(t, admission.LimitPolicy{Max: 100, Min: 60, Window: 100 * time.Millisecond})
	floor.calls(4, 100*time.Millisecond, admission.Failure)
	floor.wantLimit(60)
}

// Ignored releases, however many and however slow, move nothing: not the limit, not
// the window, not the warm-up.
func TestLimitIgnoredReleasesMoveNothing(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 200})
	for range 20 {
		l.round(50, 1, admission.Online, time.Millisecond, admission.Success)
		l.clock.Advance(100 * time.Millisecond)
	}
	before := l.stats()
	for range 20 {
		l.round(50, 1, admission.Online, 400*time.Millisecond, admission.Ignored)
	}
	if after := l.stats(); after.Limit != before.Limit || after.Recent != before.Recent || after.Baseline != before.Baseline {
		t.Fatalf("Ignored releases moved the limit: %+v, then %+v", before, after)
	}
	cold := newLimiter(t, admission.LimitPolicy{Max: 10})
	cold.calls(5, time.Second, admission.Ignored)
	if !cold.lim.Cold() || cold.stats().InFlight != 0 {
		t.Fatal("Ignored releases warmed the limiter, or kept their slots")
	}
}

// The baseline is the mean latency of the first ten online successes measured; later
// windows move it by a twentieth of their difference, or halfway at once toward a
// latency under half of it (at exactly half, by the usual twentieth). A refused caller
// is told to wait the recent latency.
func TestLimitBaselineLearnsThenFollows(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	want := func(baseline, recent time.Duration) {
		t.Helper()
		s := l.stats()
		if !s.Ready || s.Baseline != baseline || s.Recent != recent || l.lim.RetryAfter() != recent {
			t.Fatalf("%+v, RetryAfter %v; want ready, baseline %v, recent and RetryAfter %v", s, l.lim.RetryAfter(), baseline, recent)
		}
	}
	if l.lim.RetryAfter() != 100*time.Millisecond {
		t.Fatalf("RetryAfter before a baseline %v, want the Window", l.lim.RetryAfter())
	}
	l.calls(10, 4*time.Millisecond, admission.Success)
	if l.stats().Ready {
		t.Fatal("ready before the window closed")
	}
	l.clock.Advance(100 * time.Millisecond)
	l.calls(1, 0, admission.Failure) // closes the window: ten samples of 4ms
	want(4*time.Millisecond, 4*time.Millisecond)
	l.clock.Advance(93 * time.Millisecond)
	l.calls(4, 7*time.Millisecond, admission.Success)
	want(4*time.Millisecond+3*time.Millisecond/20, 7*time.Millisecond)
	l.clock.Advance(99 * time.Millisecond)
	l.calls(4, time.Millisecond, admission.Success) // under half the baseline
	want((4*time.Millisecond+3*time.Millisecond/20+time.Millisecond)/2, time.Millisecond)

	half := newLimiter(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	half.calls(10, 4*time.Millisecond, admission.Success)
	half.clock.Advance(100 * time.Millisecond)
	half.calls(1, 0, admission.Failure)
	half.clock.Advance(98 * time.Millisecond)
	half.calls(4, 2*time.Millisecond, admission.Success) // exactly half
	if s := half.stats(); s.Recent != 2*time.Millisecond || s.Baseline != 4*time.Millisecond-2*time.Millisecond/20 {
		t.Fatalf("%+v, want recent 2ms and the baseline 4ms - 2ms/20", s)
	}
}

// Past Tolerance times the baseline the limit contracts smoothly: a fifth of the way
// to limit*gradient + sqrt(limit), the gradient Tolerance*baseline/latency held
// within [0.5, 1]. A healthy window then explores up by the square root while the
// limit is used, but no further than twice the demand seen.
func TestLimitSlowWindowsContractSmoothlyAndExploringStopsAtTwiceTheDemand(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	l.calls(10, time.Millisecond, admission.Success)
	l.clock.Advance(99 * time.Millisecond)
	l.calls(1, time.Millisecond, admission.Success) // baseline 1ms, demand 10
	if s := l.stats(); !s.Ready || s.Baseline != time.Millisecond {
		t.Fatalf("%+v, want a 1ms baseline", s)
	}
	l.clock.Advance(90 * time.Millisecond)
	l.calls(4, 10*time.Millisecond, admission.Success)
	l.wantLimit(92) // 100*0.8 + (100*0.5 + sqrt(100))*0.2
	l.clock.Advance(90 * time.Millisecond)
	l.calls(4, 10*time.Millisecond, admission.Success)
	l.wantLimit(84) // 92*0.8 + (92*0.5 + sqrt(92))*0.2 = 84.7
	l.clock.Advance(98 * time.Millisecond)
	l.calls(43, 2*time.Millisecond, admission.Success)
	l.wantLimit(86) // 84.7 + sqrt(84.7), held to twice the demand of 43
}

// A window just past Tolerance moves the limit by a gradient close to 1 plus the
// square root of the limit, which can point above where it is: the limit still never
// rises past Max.
func TestLimitJustPastToleranceStaysWithinMax(t *testing.T) {
	l := ready(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.wantLimit(100)
	l.clock.Advance(98 * time.Millisecond)
	l.calls(4, 2200*time.Microsecond, admission.Success) // 2.2ms: a ratio of about 2.08 to the moved baseline
	if s := l.stats(); s.Recent != 2200*time.Microsecond {
		t.Fatalf("the window did not close on its fourth release: %+v", s)
	}
	l.wantLimit(100)
}

// Latency alone contracts the limit no lower than the demand of the last healthy
// windows: after a healthy window with 95 calls in flight, a slow window takes the
// limit to 95, not to the smooth step's 92.
func TestLimitSlowWindowStopsAtTheHealthyDemand(t *testing.T) {
	l := ready(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 10, time.Millisecond) // demand 10
	l.clock.Advance(98 * time.Millisecond)
	slots := l.takeN(95, admission.Online)
	l.clock.Advance(time.Millisecond)
	release(slots[:94], admission.Success)
	l.clock.Advance(time.Millisecond)
	slots[94].Release(admission.Success) // closes a healthy window: demand 95
	l.wantLimit(100)
	l.clock.Advance(90 * time.Millisecond)
	l.calls(4, 10*time.Millisecond, admission.Success)
	l.wantLimit(95) // 100*0.8 + (100*0.5 + sqrt(100))*0.2 = 92, held at 95
}

// Latency alone never holds the limit below twice what the healthy rate of successes
// keeps in flight at the recent latency (Little's law): after drops took it lower, a
// slow window without drops doubles it back toward that need.
func TestLimitSlowWindowsDoubleBackToTheHealthyRatesNeed(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	l.calls(10, time.Millisecond, admission.Success)
	l.clock.Advance(99 * time.Millisecond)
	l.calls(1, time.Millisecond, admission.Success) // baseline 1ms
	l.clock.Advance(time.Millisecond)
	l.calls(39, time.Millisecond, admission.Success)
	l.clock.Advance(97 * time.Millisecond)
	l.calls(1, time.Millisecond, admission.Success) // healthy: 40 successes in 100ms
	l.wantLimit(100)
	for _, want := range []int{50, 25, 12} {
		l.clock.Advance(99 * time.Millisecond)
		l.calls(4, time.Millisecond, admission.Failure)
		l.wantLimit(want)
	}
	// need = 2 * 40/100ms * 50ms = 40 messages
	for _, want := range []int{25, 40, 40} {
		l.clock.Advance(50 * time.Millisecond)
		l.calls(4, 50*time.Millisecond, admission.Success)
		l.wantLimit(want)
	}
}

// A healthy window explores only while the limit is used at least half: a limit
// under its ceiling (twice the demand) stays where it is when few calls use it.
func TestLimitUnderItsCeilingExploresOnlyWhenUsed(t *testing.T) {
	l := ready(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 60, time.Millisecond) // baseline 1ms, demand 60
	l.calls(4, 100*time.Millisecond, admission.Failure)
	l.wantLimit(50) // every release a drop: halved, well under twice the demand
	l.clock.Advance(99 * time.Millisecond)
	l.calls(4, time.Millisecond, admission.Success)
	l.wantLimit(50) // healthy, but 4 in flight is not half of 50
	l.clock.Advance(99 * time.Millisecond)
	l.calls(25, time.Millisecond, admission.Success)
	l.wantLimit(57) // 25 is half: 50 + sqrt(50)
}

// Before the baseline exists, a window without drops explores the limit back up when
// online calls answered and used at least half of it (exactly half counts); a window in
// which only bulk work answered does not, however much bulk work it held.
func TestLimitWarmUpExploresOnOnlineAnswersUsingHalf(t *testing.T) {
	p := admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}
	t.Run("online answers, exactly half used", func(t *testing.T) {
		l := newLimiter(t, p)
		l.clock.Advance(100 * time.Millisecond)
		l.calls(4, time.Millisecond, admission.Failure)
		l.wantLimit(50)
		l.clock.Advance(100 * time.Millisecond)
		l.calls(25, time.Millisecond, admission.Success) // 25 of 50 in flight
		l.wantLimit(57)                                  // 50 + sqrt(50)
	})
	t.Run("bulk answers only", func(t *testing.T) {
		l := newLimiter(t, p)
		var bulk []admission.Slot
		for range 4 {
			bulk = append(bulk, l.take(7, admission.Bulk)) // held across the next window's close
		}
		l.clock.Advance(100 * time.Millisecond)
		l.calls(4, time.Millisecond, admission.Failure)
		l.wantLimit(50)
		if l.stats().Ready {
			t.Fatal("ready without a success")
		}
		l.clock.Advance(100 * time.Millisecond)
		release(bulk, admission.Success) // 28 of 50 in flight; the window closes with the fourth
		l.wantLimit(50)
	})
}

// runQuiet runs n healthy windows of one call in flight at a time (1ms each, the
// window closing at its fourth release): a quiet destination.
func (l *limiter) runQuiet(n int) {
	l.t.Helper()
	for range n {
		l.clock.Advance(97 * time.Millisecond)
		for range 4 {
			l.calls(1, time.Millisecond, admission.Success)
		}
	}
}

// busyLimiter warms a limiter of Max 100 up with 50 calls in flight: a busy
// destination whose healthy demand, rate and peak the limit remembers.
func busyLimiter(t *testing.T) *limiter {
	t.Helper()
	l := ready(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 50, time.Millisecond) // baseline 1ms
	for range 3 {
		l.clock.Advance(99 * time.Millisecond)
		l.calls(50, time.Millisecond, admission.Success)
	}
	l.wantLimit(100)
	return l
}

// What the limit remembers of a busy period (the peak in flight and the rate of
// successes of its healthy windows, which floor a contraction by latency) fades by a
// hundredth a window: after 300 quiet windows, windows fifty times slower than the
// baseline contract the limit (to 54 in ten windows, the baseline following the
// latency), where a busy period still remembered would hold it at 100.
func TestLimitForgetsAnOldBusyPeriodWhenLatencyRises(t *testing.T) {
	l := busyLimiter(t)
	l.runQuiet(300)
	l.wantLimit(100) // quiet windows do not explore past a limit they do not use
	for range 10 {
		l.clock.Advance(50 * time.Millisecond)
		l.calls(4, 50*time.Millisecond, admission.Success)
	}
	if got := l.stats().Limit; got >= 70 {
		t.Fatalf("limit %d after ten slow windows, want it contracted below 70", got)
	}
}

// The limit explores while it is used up to twice the demand of recent windows, a
// peak that fades by a hundredth a window: after a quiet period and drops that
// contracted it, it explores back to twice the 11 calls in flight that use it now, and
// not past it (an old busy peak still remembered would let it overshoot to 26).
func TestLimitExploresToTwiceTheRecentDemand(t *testing.T) {
	l := busyLimiter(t)
	l.runQuiet(300)
	for i := 0; l.stats().Limit > 15; i++ { // windows of drops contract the limit
		if i == 20 {
			t.Fatalf("limit %d after 20 windows of drops", l.stats().Limit)
		}
		l.clock.Advance(100 * time.Millisecond)
		l.calls(4, time.Millisecond, admission.Failure)
	}
	for range 6 { // windows with 11 in flight: the limit is used while it is at most 22
		l.clock.Advance(99 * time.Millisecond)
		l.calls(11, time.Millisecond, admission.Success)
	}
	l.wantLimit(22)
}

// Recovered returns the limit to the one of the last healthy window, the window that
// ended the warm-up being the first; a window at exactly Tolerance, with bulk work in
// flight, is healthy too, and a window in which only bulk work answered measures no
// online latency and counts as healthy whatever the last measured window said.
func TestLimitRecoveredReturnsToTheLastHealthyWindow(t *testing.T) {
	t.Run("the warm-up's", func(t *testing.T) {
		l := ready(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 10, time.Millisecond)
		if !l.stats().Ready {
			t.Fatal("not ready after the warm-up window")
		}
		l.wantLimit(100)
		l.clock.Advance(100 * time.Millisecond)
		l.calls(4, time.Millisecond, admission.Failure) // every call dropped: halve
		l.wantLimit(50)
		l.lim.Recovered()
		l.wantLimit(100)
	})
	t.Run("at Tolerance with bulk work", func(t *testing.T) {
		l := ready(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 60, 9*time.Millisecond) // baseline 9ms
		l.calls(4, 100*time.Millisecond, admission.Failure)
		l.wantLimit(50)
		// Bulk work in flight and four online calls of 19ms: the baseline moves to
		// 9ms + (19ms-9ms)/20 = 9.5ms, and 19ms is exactly Tolerance (2) times it.
		bulk := l.take(10, admission.Bulk)
		l.calls(4, 19*time.Millisecond, admission.Success)
		l.clock.Advance(81 * time.Millisecond)
		bulk.Release(admission.Success) // closes the window
		if s := l.stats(); s.Baseline != 9500*time.Microsecond || s.Recent != 19*time.Millisecond {
			t.Fatalf("%+v, want baseline 9.5ms and recent 19ms", s)
		}
		l.wantLimit(50)
		l.calls(4, 100*time.Millisecond, admission.Failure)
		l.wantLimit(25)
		l.lim.Recovered()
		l.wantLimit(50) // the healthy window's limit, not the 100 of the warm-up
	})
	t.Run("bulk answers only", func(t *testing.T) {
		l := ready(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
		l.clock.Advance(90 * time.Millisecond)
		l.calls(4, 10*time.Millisecond, admission.Success)
		l.wantLimit(92) // a slow window, no bulk work: the limit contracts
		var bulk []admission.Slot
		for range 4 {
			bulk = append(bulk, l.take(5, admission.Bulk))
		}
		l.clock.Advance(100 * time.Millisecond)
		release(bulk, admission.Success) // the window closes with the fourth: no online call in it
		l.wantLimit(92)
		l.lim.Recovered()
		l.wantLimit(92)
	})
}

// A destination that answers in no measurable time (a clock that did not move during
// the calls) has a baseline of 0 and healthy windows: the limit stays where it is, and
// its latency ratio is no division by zero.
func TestLimitZeroLatencyWindowsAreHealthy(t *testing.T) {
	l := ready(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond}, 10, 0)
	if s := l.stats(); !s.Ready || s.Baseline != 0 {
		t.Fatalf("after a warm-up of zero latency: ready %v baseline %v, want true 0", s.Ready, s.Baseline)
	}
	for range 5 {
		l.clock.Advance(100 * time.Millisecond)
		l.calls(4, 0, admission.Success)
		l.wantLimit(100)
	}
}
