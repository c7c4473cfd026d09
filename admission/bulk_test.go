package admission_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
)

// bulkWindow takes bulk calls of the given weights and three online calls, gives all
// back but the last online call, lets a Window pass and gives that one back with r,
// closing the window with every release in it.
func (l *limiter) bulkWindow(r admission.Result, weights ...int) {
	l.t.Helper()
	var slots []admission.Slot
	for _, w := range weights {
		slots = append(slots, l.take(w, admission.Bulk))
	}
	online := l.takeN(3, admission.Online)
	release(append(slots, online[:2]...), admission.Success)
	l.clock.Advance(100 * time.Millisecond)
	online[2].Release(r)
}

func wantWoken(t *testing.T, wake <-chan struct{}, want bool, what string) {
	t.Helper()
	select {
	case <-wake:
		if !want {
			t.Fatalf("%s woke the bulk callers", what)
		}
	default:
		if want {
			t.Fatalf("%s woke no bulk caller", what)
		}
	}
}

// The bulk budget starts at BulkShare of Max, halves in a window with drops (never
// below 1), and grows by its square root in a window in which bulk work held at least
// half of it (not in one that held less), up to where it started; a budget that grew
// wakes bulk callers waiting for headroom, one left where it was does not.
func TestBulkBudgetHalvesOnDropsAndGrowsWhenUsed(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond})
	l.wantBulkLimit(50)
	wake := l.lim.BulkWake()
	for range 3 {
		l.calls(4, 100*time.Millisecond, admission.Success) // a window closes at the ceiling
	}
	l.wantBulkLimit(50)
	wantWoken(t, wake, false, "a window that left the bulk budget at 50")
	l.bulkWindow(admission.Failure, 1, 1, 1)
	l.wantBulkLimit(25)
	l.bulkWindow(admission.Success, 4, 4, 4) // 12 of 25: less than half
	l.wantBulkLimit(25)
	wake = l.lim.BulkWake()
	l.bulkWindow(admission.Success, 5, 4, 4) // 13 of 25
	l.wantBulkLimit(30)
	wantWoken(t, wake, true, "a budget that grew")
	for range 6 {
		l.bulkWindow(admission.Failure, 1)
	}
	l.wantBulkLimit(1)
	if got := l.lim.BulkHeadroom(); got != 1 {
		t.Fatalf("headroom %d at the floor, want 1", got)
	}
	for range 30 {
		l.bulkWindow(admission.Success, max(l.lim.BulkHeadroom(), 1))
	}
	l.wantBulkLimit(50)
}

// A bulk budget that grows at a window's close wakes the bulk callers waiting for
// headroom, also when no bulk call gave messages back (the window closed on an
// online release while bulk work was still in flight).
func TestBulkBudgetGrowthAloneWakesBulkCallers(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond})
	l.bulkWindow(admission.Failure, 1, 1, 1)
	l.wantBulkLimit(25)
	bulk := l.take(13, admission.Bulk) // more than half of the budget: used
	online := l.takeN(4, admission.Online)
	wake := l.lim.BulkWake()
	l.clock.Advance(100 * time.Millisecond)
	release(online, admission.Success)
	l.wantBulkLimit(30) // 25 + sqrt(25)
	wantWoken(t, wake, true, "a budget that grew")
	bulk.Release(admission.Success)
}

// The limit learns the online calls' deadline from the latency of those dropped (the
// first drops set it, later ones move it a quarter of the way), and bulk work gives
// way while online latency is past 40 % of it: the budget shrinks by target/latency
// (by half at most), and grows more slowly as online latency nears the target.
func TestBulkBudgetFollowsTheLearnedOnlineDeadline(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond})
	l.calls(10, time.Millisecond, admission.Success)
	l.clock.Advance(99 * time.Millisecond)
	l.calls(1, 0, admission.Success) // the baseline
	if !l.stats().Ready {
		t.Fatal("no baseline after eleven successes")
	}
	l.calls(4, 100*time.Millisecond, admission.Dropped) // deadline 100ms, target 40ms
	l.wantBulkLimit(25)
	l.clock.Advance(50 * time.Millisecond)
	l.calls(4, 50*time.Millisecond, admission.Success) // 50ms > 40ms: 25 * 40/50
	l.wantBulkLimit(20)
	l.clock.Advance(80 * time.Millisecond)
	bulk := l.take(10, admission.Bulk)
	l.calls(4, 20*time.Millisecond, admission.Success) // used, at half the target: 20 + sqrt(20)/2
	l.wantBulkLimit(22)
	bulk.Release(admission.Ignored) // no verdict: it does not count in the next window
	l.clock.Advance(100 * time.Millisecond)
	l.calls(4, 200*time.Millisecond, admission.Dropped) // deadline 125ms, target 50ms; halved
	l.wantBulkLimit(11)
	l.clock.Advance(37500 * time.Microsecond)
	l.calls(4, 62500*time.Microsecond, admission.Success) // 11.1 * 50/62.5
	l.wantBulkLimit(8)
	l.clock.Advance(100 * time.Millisecond)
	l.calls(4, 100*time.Millisecond, admission.Success) // 50/100: by half at most
	l.wantBulkLimit(4)
}

// Only online calls that ended without an answer teach the deadline: an error answer
// (Failure) halves the budget as a drop but says nothing of how long callers wait, so
// online calls answering at 60ms beside bulk work grow the budget back.
func TestBulkBudgetLearnsTheDeadlineOnlyFromDroppedOnlineCalls(t *testing.T) {
	for _, c := range []struct {
		r    admission.Result
		grow bool
	}{{admission.Failure, true}, {admission.Dropped, false}} {
		t.Run(c.r.String(), func(t *testing.T) {
			l := ready(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 10, time.Millisecond)
			l.calls(4, 100*time.Millisecond, c.r)
			l.wantBulkLimit(25)
			bulk := l.take(13, admission.Bulk)
			l.clock.Advance(40 * time.Millisecond)
			l.calls(4, 60*time.Millisecond, admission.Success)
			bulk.Release(admission.Ignored)
			if got := l.stats().BulkLimit; (got > 25) != c.grow {
				t.Fatalf("bulk budget %d after a used window of 60ms online answers, want grown from 25: %v", got, c.grow)
			}
		})
	}
}

// A window in which no online call answered measures no online latency: bulk work
// that used its budget in it grows the budget by its square root, however slow the
// last measured window was for online calls.
func TestBulkBudgetGrowsInAWindowWithoutOnlineLatency(t *testing.T) {
	l := ready(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.wantBulkLimit(50)
	// An online call dropped at its 10ms deadline: the pacer learns the deadline, and
	// the window's drop halves the budget.
	l.clock.Advance(90 * time.Millisecond)
	missed := l.take(1, admission.Online)
	l.calls(3, time.Millisecond, admission.Success)
	l.clock.Advance(9 * time.Millisecond)
	missed.Release(admission.Dropped) // the window closes with it
	l.wantBulkLimit(25)
	// Online calls at 8ms, past 40% of the deadline: the budget shrinks.
	l.clock.Advance(92 * time.Millisecond)
	l.calls(4, 8*time.Millisecond, admission.Success)
	l.wantBulkLimit(12)
	// Bulk work alone, using the whole budget: it grows.
	var bulk []admission.Slot
	for range 4 {
		bulk = append(bulk, l.take(3, admission.Bulk))
	}
	l.clock.Advance(100 * time.Millisecond)
	release(bulk, admission.Success) // the window closes with the fourth
	l.wantBulkLimit(16)              // 12.5 + sqrt(12.5)
}

// An online call dropped at its deadline teaches the bulk pacer the online deadline
// from its latency, kept in milliseconds beside a count of such calls; a latency too
// long for its field (2^40 ms, about 35 years, on a fake clock) is capped, not
// carried into the count: the pacer learns a very long deadline, not one of a
// millisecond, and bulk work used beside 1ms online calls grows instead of being cut.
func TestLimitMissedLatencyIsCappedNotCarried(t *testing.T) {
	l := ready(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 10, time.Millisecond)
	l.wantBulkLimit(50)
	s := l.take(1, admission.Online)
	l.clock.Advance((1<<40 + 1) * time.Millisecond)
	s.Release(admission.Dropped) // the window closes on it (ten Windows passed)
	l.wantBulkLimit(25)

	bulk := l.take(13, admission.Bulk) // more than half of the budget: used
	l.calls(4, time.Millisecond, admission.Success)
	l.clock.Advance(100 * time.Millisecond)
	l.calls(1, time.Millisecond, admission.Success)
	bulk.Release(admission.Success)
	if got := l.stats().BulkLimit; got <= 25 {
		t.Fatalf("bulk budget %d after a used window of 1ms online calls, want it grown from 25", got)
	}
}

// While bulk work gives way in a slow window, online calls keep their limit and
// explore up by its square root when the window used half of the limit — exactly
// half counts — and not when it used less, though the limit is under its ceiling.
func TestLimitExploresBesideGivingWayBulkAtExactlyHalfUsed(t *testing.T) {
	l := ready(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5, Window: 100 * time.Millisecond}, 60, time.Millisecond) // baseline 1ms, demand 60
	l.wantLimit(100)
	// One drop of five: the limit contracts to 100 * (1 - 0.5/5).
	slots := l.takeN(5, admission.Online)
	l.clock.Advance(99 * time.Millisecond)
	slots[0].Release(admission.Dropped)
	release(slots[1:4], admission.Success)
	l.clock.Advance(time.Millisecond) // the window closes with its fifth release
	slots[4].Release(admission.Success)
	l.wantLimit(90)
	// Slow windows with bulk work and 5 online calls in flight (online latency 100ms).
	slowWindow := func(bulkWeight int) {
		t.Helper()
		bulk := l.take(bulkWeight, admission.Bulk)
		online := l.takeN(5, admission.Online)
		l.clock.Advance(100 * time.Millisecond)
		bulk.Release(admission.Success)
		release(online, admission.Success)
	}
	slowWindow(30)
	l.wantLimit(90) // 35 in flight, under half of 90 (and 90 under the ceiling of 100)
	slowWindow(40)
	l.wantLimit(99) // 45 in flight, half of 90: 90 + sqrt(90)
}

// Admission of bulk calls: a bulk call heavier than the budget is admitted when it is
// the only bulk call (a batch never waits forever) and one that fills the budget
// exactly beside others is too; a message past the budget is refused. The headroom is
// the budget less the bulk work in flight.
func TestBulkAdmissionWithinItsBudget(t *testing.T) {
	heavy := newLimiter(t, admission.LimitPolicy{Max: 10, BulkShare: 0.5})
	heavy.take(8, admission.Bulk)
	heavy.refusal(1, admission.Bulk) // beside 8 of a budget of 5
	if got := heavy.stats().BulkInFlight; got != 8 {
		t.Fatalf("%d bulk messages in flight, want 8", got)
	}

	l := newLimiter(t, admission.LimitPolicy{Max: 10, BulkShare: 0.5})
	l.wantBulkLimit(5)
	if got := l.lim.BulkHeadroom(); got != 5 {
		t.Fatalf("idle headroom %d, want 5", got)
	}
	s := l.take(2, admission.Bulk)
	if got := l.lim.BulkHeadroom(); got != 3 {
		t.Fatalf("headroom with 2 bulk in flight %d, want 3", got)
	}
	l.take(3, admission.Bulk) // 2 + 3 = the budget of 5
	l.refusal(1, admission.Bulk)
	if got := l.stats().BulkInFlight; got != 5 {
		t.Fatalf("%d bulk messages in flight, want 5", got)
	}
	s.Release(admission.Ignored)
	if got := l.lim.BulkHeadroom(); got != 2 {
		t.Fatalf("headroom after a release %d, want 2", got)
	}
}

// Bulk work waits when online calls fill the limit, and only then: the bulk
// messages in flight count against the bulk budget, not as online calls filling the
// limit, so bulk calls beside each other take the whole budget even when it is the
// whole limit, and BulkHeadroom says so.
func TestBulkWaitsOnlyForOnlineCallsFillingTheLimit(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 10, BulkShare: 1})
	l.wantBulkLimit(10)
	first := l.take(6, admission.Bulk)
	if got := l.lim.BulkHeadroom(); got != 4 {
		t.Fatalf("BulkHeadroom beside 6 bulk messages %d, want 4", got)
	}
	l.take(4, admission.Bulk) // 6 + 4 bulk of a budget and a limit of 10
	first.Release(admission.Success)

	online := l.takeN(10, admission.Online) // online calls fill the limit
	l.refusal(1, admission.Bulk)
	if got := l.lim.BulkHeadroom(); got != 0 {
		t.Fatalf("BulkHeadroom beside online calls filling the limit %d, want 0", got)
	}
	online[0].Release(admission.Success)
	l.take(1, admission.Bulk) // 9 online calls of 10 leave bulk work its room
}

// contractedLimiter returns a limiter with a bulk budget of 100 whose online limit a
// slow window (no bulk work in it) contracted to 92: the budget stays whole.
func contractedLimiter(t *testing.T) *limiter {
	t.Helper()
	l := ready(t, admission.LimitPolicy{Max: 100, BulkShare: 1, Window: 100 * time.Millisecond}, 10, time.Millisecond) // baseline 1ms
	l.clock.Advance(90 * time.Millisecond)
	l.calls(4, 10*time.Millisecond, admission.Success)
	l.wantLimit(92)
	l.wantBulkLimit(100)
	return l
}

// Bulk work is admitted up to its whole budget, also above an online limit that a
// slow window contracted: the online limit does not cap the bulk budget, and the
// headroom of a bulk caller with no bulk work in flight is the whole budget.
func TestBulkBudgetAboveAContractedLimit(t *testing.T) {
	l := contractedLimiter(t)
	l.take(50, admission.Bulk)
	l.take(50, admission.Bulk) // 100 bulk messages beside bulk work: past the limit of 92
	if got := l.stats().BulkInFlight; got != 100 {
		t.Fatalf("%d bulk messages in flight, want the whole budget of 100", got)
	}
	idle := contractedLimiter(t)
	if got := idle.lim.BulkHeadroom(); got != 100 {
		t.Fatalf("BulkHeadroom %d, want the whole budget of 100", got)
	}
	idle.take(100, admission.Bulk)
}

// warmBulk gives l a 1ms baseline from healthy online calls.
func (l *limiter) warmBulk() {
	for range 20 {
		l.round(10, 1, admission.Online, time.Millisecond, admission.Success)
		l.clock.Advance(100 * time.Millisecond)
	}
}

// drainWindow is one window of a drain: bulk work takes its whole headroom, online
// calls answer in latency, and the window closes. It returns the online calls refused.
func (l *limiter) drainWindow(latency time.Duration) int {
	l.t.Helper()
	bulk := l.take(max(l.lim.BulkHeadroom(), 1), admission.Bulk)
	refused := l.round(10, 1, admission.Online, latency, admission.Success)
	bulk.Release(admission.Success)
	l.clock.Advance(100 * time.Millisecond)
	return refused
}

// Bulk work grows its budget while online calls are served well within their
// deadline, and gives it back, before online calls lose anything, once online
// latency passes a share of that deadline, which the limit learned from the online
// calls it saw dropped.
func TestBulkBudgetFollowsOnlineLatencyAgainstTheirDeadline(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 400, BulkShare: 0.5})
	l.warmBulk()
	// Two online calls miss their 500ms deadline: the budget halves, and the limit
	// now knows what the online calls' deadline is.
	l.round(2, 1, admission.Online, 500*time.Millisecond, admission.Dropped)
	l.round(10, 1, admission.Online, time.Millisecond, admission.Success)
	if s := l.stats(); s.BulkLimit > 100 {
		t.Fatalf("after a window of drops the bulk limit is %d, want at most half of 200", s.BulkLimit)
	}
	// A drain whose online latency stays at 50ms, a tenth of the deadline: the
	// budget grows back to its full share.
	for range 40 {
		if n := l.drainWindow(50 * time.Millisecond); n != 0 {
			t.Fatalf("online calls refused beside a drain: %d", n)
		}
	}
	limit := l.stats().Limit
	if s := l.stats(); s.BulkLimit != 200 {
		t.Fatalf("online latency at a tenth of the deadline: %+v, want the full bulk share 200", s)
	}
	// Online latency rises to 300ms, past 40 % of the deadline but inside it, while
	// the drain goes on: bulk work gives way, online calls keep their limit.
	for range 10 {
		if n := l.drainWindow(300 * time.Millisecond); n != 0 {
			t.Fatalf("online calls refused while bulk work gives way: %d", n)
		}
	}
	if s := l.stats(); s.BulkLimit > 40 || s.Limit < limit {
		t.Fatalf("online latency at 60 %% of the deadline beside a drain: %+v, want a bulk limit of at most 40 and the limit of %d kept", s, limit)
	}
}

// Without bulk work the same latency, far past the baseline, contracts the online
// limit as before: the rule above belongs to windows in which bulk work can give way.
func TestOnlineLimitContractsForLatencyWithoutBulkWork(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 400, BulkShare: 0.5})
	l.warmBulk()
	before := l.stats().Limit
	for range 10 {
		l.round(10, 1, admission.Online, 300*time.Millisecond, admission.Success)
	}
	if s := l.stats(); s.Limit >= before {
		t.Fatalf("online latency 300x its baseline, no bulk work: %+v, want a limit under %d", s, before)
	}
}

// Bulk messages in flight do not take online calls' room: with the bulk budget
// full, online calls still get the whole limit. Online calls filling the limit leave
// bulk work no headroom.
func TestBulkWorkDoesNotCrowdOutOnlineCalls(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5})
	bulk := l.take(50, admission.Bulk)
	online := l.takeN(100, admission.Online)
	l.refusal(1, admission.Online)
	bulk.Release(admission.Success)
	if got := l.lim.BulkHeadroom(); got != 0 {
		t.Fatalf("bulk headroom while online calls fill the limit: %d, want 0", got)
	}
	l.refusal(1, admission.Bulk)
	release(online, admission.Success)
	if got := l.lim.BulkHeadroom(); got != 50 {
		t.Fatalf("bulk headroom of an idle destination: %d, want 50", got)
	}
}

// A hung broker while a drain is in flight: the drops cut bulk work first, then the
// online limit contracts toward Min as it would without bulk work.
func TestHungBrokerBesideADrainContractsBothBudgets(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 500, Min: 2, BulkShare: 0.5})
	l.warmBulk()
	for range 30 {
		bulk := l.take(max(l.lim.BulkHeadroom(), 1), admission.Bulk)
		l.round(100, 1, admission.Online, 500*time.Millisecond, admission.Dropped)
		bulk.Release(admission.Dropped)
	}
	if s := l.stats(); s.BulkLimit > 1 || s.Limit > 4 {
		t.Fatalf("after 30 windows of drops beside a drain: %+v, want a bulk limit of 1 and a limit near Min 2", s)
	}
}

// A bulk caller with no headroom waits on BulkWake: it is closed when bulk work
// gives its messages back, not when an online call does, and a closed channel is not
// handed out again.
func TestBulkWakeClosesWhenBulkWorkEnds(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5})
	bulk := l.take(50, admission.Bulk)
	wake := l.lim.BulkWake()
	l.calls(1, 0, admission.Success)
	wantWoken(t, wake, false, "an online call's end")
	bulk.Release(admission.Success)
	wantWoken(t, wake, true, "the bulk call's end")
	if next := l.lim.BulkWake(); next == wake {
		t.Fatal("BulkWake handed back the closed channel")
	}
}

// Online calls dropped beside a drain that can still give way cut the drain, not the
// online limit.
func TestOnlineDropsBesideADrainCutBulkWorkFirst(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 400, BulkShare: 0.5})
	l.warmBulk()
	before := l.stats().Limit
	for range 3 {
		bulk := l.take(max(l.lim.BulkHeadroom(), 1), admission.Bulk)
		l.round(20, 1, admission.Online, 500*time.Millisecond, admission.Dropped)
		l.clock.Advance(100 * time.Millisecond)
		l.round(1, 1, admission.Online, 500*time.Millisecond, admission.Dropped) // closes the window of drops
		l.round(10, 1, admission.Online, 100*time.Millisecond, admission.Success)
		bulk.Release(admission.Success)
	}
	if s := l.stats(); s.BulkLimit > 50 || s.Limit != before {
		t.Fatalf("3 windows with online drops beside a drain: %+v, want a bulk limit well under 200 and the limit %d kept", s, before)
	}
}

// Online calls keep the other half while a bulk batch holds the bulk share; drops of
// online calls halve the share per window, an unused budget stays where the drops
// left it (a backlog that turns up later must not find a budget that grew while
// nobody used it), and a used one, with online calls served, grows back to its full
// share within seconds.
func TestLimitBulkYieldsFirst(t *testing.T) {
	l := newLimiter(t, admission.LimitPolicy{Max: 100, BulkShare: 0.5})
	l.warmBulk()
	if got := l.lim.BulkHeadroom(); got != 50 {
		t.Fatalf("bulk headroom of a healthy idle destination: %d, want 50", got)
	}
	batch := l.take(50, admission.Bulk)
	l.refusal(1, admission.Bulk)
	online := l.takeN(50, admission.Online)
	l.clock.Advance(time.Millisecond)
	release(online, admission.Success)
	batch.Release(admission.Success)
	for range 3 {
		l.round(10, 1, admission.Online, time.Millisecond, admission.Success)
		l.round(2, 1, admission.Online, 500*time.Millisecond, admission.Dropped)
		l.clock.Advance(100 * time.Millisecond)
	}
	if s := l.stats(); s.BulkLimit >= 20 || l.lim.BulkHeadroom() >= 20 {
		t.Fatalf("bulk limit while online calls are dropped: %+v (headroom %d), want well under its healthy 50", s, l.lim.BulkHeadroom())
	}
	low := l.stats().BulkLimit
	for range 15 {
		l.round(10, 1, admission.Online, time.Millisecond, admission.Success)
		l.clock.Advance(100 * time.Millisecond)
	}
	if s := l.stats(); s.BulkLimit != low {
		t.Fatalf("bulk limit after 15 windows without bulk work: %d, want unchanged %d", s.BulkLimit, low)
	}
	for range 30 {
		l.round(1, l.lim.BulkHeadroom(), admission.Bulk, 0, admission.Success)
		l.round(10, 1, admission.Online, time.Millisecond, admission.Success)
		l.clock.Advance(100 * time.Millisecond)
	}
	if s := l.stats(); s.BulkLimit != 50 {
		t.Fatalf("bulk limit after the drops stopped and bulk work used it: %+v, want its full share 50 back", s)
	}
}
