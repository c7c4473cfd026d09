package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// limited is a harness whose circuit has an adaptive limit and cannot open, so that
// the limit alone is under test.
func limited(t *testing.T, lp breaker.LimitPolicy) *harness {
	return newHarness(t, breaker.Policy{Limit: lp})
}

// round admits n calls of weight w and priority pr at once, lets latency pass and
// completes them all with o (drop: Drop). It returns how many were refused.
func (h *harness) round(n, w int, pr breaker.Priority, latency time.Duration, o breaker.Outcome, drop bool) int {
	h.t.Helper()
	var ps []breaker.Permit
	refused := 0
	for range n {
		p, err := h.b.AcquireRequest(h.t.Context(), breaker.Request{Weight: w, Priority: pr})
		if err != nil {
			if !errors.Is(err, breaker.ErrSaturated) {
				h.t.Fatalf("AcquireRequest: %v, want a saturation refusal", err)
			}
			refused++
			continue
		}
		ps = append(ps, p)
	}
	h.clock.Advance(latency)
	for _, p := range ps {
		if drop {
			p.Drop()
		} else {
			p.Complete(o)
		}
	}
	return refused
}

func (h *harness) limit() breaker.LimitStats { return h.b.Snapshot().Limit }

func TestLimitRefusesAtOnceWithNotBeforeAndAdmitsALoneHeavyCall(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 10})
	ctx := t.Context()
	big, err := h.b.AcquireRequest(ctx, breaker.Request{Weight: 50})
	if err != nil {
		t.Fatalf("a call heavier than the limit on an idle circuit: %v, want admitted alone", err)
	}
	_, err = h.b.AcquireRequest(ctx, breaker.Request{Weight: 1})
	var le *breaker.LimitError
	if !errors.As(err, &le) || !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("over the limit: %v, want a *LimitError matching ErrSaturated", err)
	}
	if !le.NotBefore.After(h.clock.Now()) || le.Bulk {
		t.Fatalf("refusal %+v: want an online refusal with NotBefore after now", le)
	}
	big.Complete(breaker.Success)
	a, err := h.b.AcquireRequest(ctx, breaker.Request{Weight: 6})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.b.AcquireRequest(ctx, breaker.Request{Weight: 5}); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("6+5 messages under a limit of 10: %v, want refused", err)
	}
	if _, err := h.b.AcquireRequest(ctx, breaker.Request{Weight: 4}); err != nil {
		t.Fatalf("6+4 messages under a limit of 10: %v, want admitted", err)
	}
	if s := h.limit(); s.InFlight != 10 || s.Refused != 2 {
		t.Fatalf("stats %+v, want 10 in flight and 2 refused", s)
	}
	a.Complete(breaker.Success)
	if got := h.limit().InFlight; got != 4 {
		t.Fatalf("in flight after a completion: %d, want 4", got)
	}
}

func TestLimitColdStartRefusesNothing(t *testing.T) {
	// 200 first publishes that all take 300ms (connections being opened) and then a
	// healthy 1ms broker: nothing is refused.
	h := limited(t, breaker.RecommendedLimit())
	if n := h.round(200, 1, breaker.Online, 300*time.Millisecond, breaker.Success, false); n != 0 {
		t.Fatalf("cold start: %d of 200 refused", n)
	}
	for i := range 100 {
		if n := h.round(200, 1, breaker.Online, time.Millisecond, breaker.Success, false); n != 0 {
			t.Fatalf("round %d after the cold start: %d of 200 refused (stats %+v)", i, n, h.limit())
		}
		h.clock.Advance(20 * time.Millisecond)
	}
	if s := h.limit(); !s.Ready || s.Baseline > 10*time.Millisecond {
		t.Fatalf("stats %+v: want a baseline near 1ms", s)
	}
}

func TestLimitSlownessInsideDeadlinesKeepsTheHealthyDemand(t *testing.T) {
	h := limited(t, breaker.RecommendedLimit())
	for range 50 {
		h.round(100, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(50 * time.Millisecond)
	}
	// The broker now answers in 20ms: latency alone contracts the limit, but never
	// below the 100 messages it carried while healthy (its healthy rate needs fewer
	// at 20ms).
	refused := 0
	for range 100 {
		refused += h.round(100, 1, breaker.Online, 20*time.Millisecond, breaker.Success, false)
	}
	if s := h.limit(); refused != 0 || s.Limit < 100 || s.Limit == 1000 {
		t.Fatalf("slow broker: %d refused, stats %+v: want none refused and a contracted limit >= 100", refused, s)
	}
}

func TestLimitDropsContractToMinAndRecoveryExploresUp(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 500, Min: 2})
	for range 30 {
		h.round(100, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(100 * time.Millisecond)
	}
	// A hung broker: every call ends at its 500ms deadline (a drop).
	for range 20 {
		h.round(100, 1, breaker.Online, 500*time.Millisecond, 0, true)
	}
	if s := h.limit(); s.Limit > 4 {
		t.Fatalf("after 20 windows of drops: limit %d, want near Min 2", s.Limit)
	}
	// Recovery: the limit explores up again while it is used.
	for range 40 {
		h.round(100, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(100 * time.Millisecond)
	}
	if s := h.limit(); s.Limit < 100 {
		t.Fatalf("after recovery: limit %d, want back above the demand of 100", s.Limit)
	}
}

func TestLimitCancellationDoesNotContract(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 200})
	for range 20 {
		h.round(50, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(100 * time.Millisecond)
	}
	before := h.limit().Limit
	for range 20 {
		h.round(50, 1, breaker.Online, 400*time.Millisecond, breaker.Neutral, false)
	}
	if after := h.limit().Limit; after != before {
		t.Fatalf("Neutral completions moved the limit from %d to %d", before, after)
	}
}

func TestLimitBulkYieldsFirst(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5})
	ctx := t.Context()
	for range 20 {
		h.round(10, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(100 * time.Millisecond)
	}
	if got := h.b.Limiter().BulkHeadroom(); got != 50 {
		t.Fatalf("bulk headroom of a healthy idle circuit: %d, want 50", got)
	}
	batch, err := h.b.AcquireRequest(ctx, breaker.Request{Weight: 50, Priority: breaker.Bulk})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.b.AcquireRequest(ctx, breaker.Request{Weight: 1, Priority: breaker.Bulk})
	var le *breaker.LimitError
	if !errors.As(err, &le) || !le.Bulk {
		t.Fatalf("bulk past its share: %v, want a bulk *LimitError", err)
	}
	// Online calls keep the other half while the bulk batch is in flight.
	var online []breaker.Permit
	for range 50 {
		p, err := h.b.AcquireRequest(ctx, breaker.Request{})
		if err != nil {
			t.Fatalf("online call beside a bulk batch: %v", err)
		}
		online = append(online, p)
	}
	h.clock.Advance(time.Millisecond)
	for _, p := range online {
		p.Complete(breaker.Success)
	}
	batch.Complete(breaker.Success)
	// Online calls miss deadlines (drops) while the broker still answers most: the
	// bulk share halves per window and returns once the drops stop.
	for range 3 {
		h.round(10, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.round(2, 1, breaker.Online, 500*time.Millisecond, 0, true)
		h.clock.Advance(100 * time.Millisecond)
	}
	if s := h.limit(); s.BulkLimit >= 20 {
		t.Fatalf("bulk limit while online calls are dropped: %d, want well under its healthy 50 (%+v)", s.BulkLimit, s)
	}
	if got := h.b.Limiter().BulkHeadroom(); got >= 20 {
		t.Fatalf("bulk headroom while online calls are dropped: %d", got)
	}
	// Unused, the budget stays where the drops left it: a backlog that turns up later
	// must not find a budget that grew while nobody used it.
	low := h.limit().BulkLimit
	for range 15 {
		h.round(10, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(100 * time.Millisecond)
	}
	if s := h.limit(); s.BulkLimit != low {
		t.Fatalf("bulk limit after 15 windows without bulk work: %d, want unchanged %d", s.BulkLimit, low)
	}
	// Used, with online calls served, it grows back to its full share within
	// seconds.
	for range 30 {
		h.round(1, h.b.Limiter().BulkHeadroom(), breaker.Bulk, 0, breaker.Success, false)
		h.round(10, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(100 * time.Millisecond)
	}
	if s := h.limit(); s.BulkLimit != 50 {
		t.Fatalf("bulk limit after the drops stopped and bulk work used it: %+v, want its full share 50 back", s)
	}
}

func TestLimitPolicyValidationNamesTheField(t *testing.T) {
	for _, c := range []struct {
		lp    breaker.LimitPolicy
		field string
	}{
		{breaker.LimitPolicy{Max: -1}, "Limit.Max"},
		{breaker.LimitPolicy{Min: 3}, "Limit.Max"},
		{breaker.LimitPolicy{Max: 10, Min: 11}, "Limit.Min"},
		{breaker.LimitPolicy{Max: 10, Min: -1}, "Limit.Min"},
		{breaker.LimitPolicy{Max: 10, Tolerance: 0.5}, "Limit.Tolerance"},
		{breaker.LimitPolicy{Max: 10, BulkShare: 1.5}, "Limit.BulkShare"},
		{breaker.LimitPolicy{Max: 10, Window: time.Microsecond}, "Limit.Window"},
	} {
		err := breaker.Policy{Limit: c.lp}.Validate()
		var pe *breaker.PolicyError
		if !errors.As(err, &pe) || pe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", c.lp, err, c.field)
		}
	}
	if err := (breaker.Policy{Limit: breaker.RecommendedLimit()}).Validate(); err != nil {
		t.Fatalf("RecommendedLimit: %v", err)
	}
	base := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}
	on := base
	on.Limit = breaker.LimitPolicy{Max: 1000}
	rec := base
	rec.Limit = breaker.RecommendedLimit()
	if base.Fingerprint() == on.Fingerprint() || on.Fingerprint() != rec.Fingerprint() {
		t.Fatal("the limit must change the fingerprint, and its spelled-out defaults must not")
	}
}

// The ramp after recovery weighs calls by their messages: with the limit on, the
// messages in flight stay within the ramp's share of the limit, and the bulk headroom
// the outbox sizes its batches by shrinks with it.
func TestRampWeighsCallsByTheirMessages(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: 10 * time.Second,
		RampFloor: 0.1, Limit: breaker.LimitPolicy{Max: 100}})
	h.call(breaker.Failure)
	h.wantState(breaker.Open)
	h.clock.Advance(time.Second)
	h.call(breaker.Success) // the probe: closed, ramping at 10 %
	admitted := 0
	for range 400 {
		if _, err := h.b.AcquireRequest(t.Context(), breaker.Request{Weight: 3}); err == nil {
			admitted++
		}
	}
	if s := h.limit(); admitted == 0 || s.InFlight > 10 {
		t.Fatalf("ramping at 10%% of a limit of 100: %d calls of 3 admitted, %d messages in flight; want some, at most 10", admitted, s.InFlight)
	}
	if got := h.b.Limiter().BulkHeadroom(); got > 10 {
		t.Fatalf("bulk headroom while ramping: %d, want within the ramp's 10 messages", got)
	}
}

// A noisy dependency (window means alternating 1ms and 3ms) is healthy: the
// baseline is not its luckiest window, so the limit neither contracts nor refuses.
func TestLimitNoisyLatencyIsNotPressure(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 200})
	for i := range 200 {
		lat := time.Millisecond
		if i%2 == 1 {
			lat = 3 * time.Millisecond
		}
		if n := h.round(20, 1, breaker.Online, lat, breaker.Success, false); n != 0 {
			t.Fatalf("round %d: %d refused", i, n)
		}
		h.clock.Advance(100 * time.Millisecond)
	}
	if s := h.limit(); s.Limit < 180 || s.BulkLimit < 50 {
		t.Fatalf("noisy but healthy: %+v, want the full limit and most of the bulk share", s)
	}
}

// After an outage the circuit's close gives the limit back what it had while
// healthy, instead of exploring up from Min.
func TestLimitReturnsToItsHealthyLevelWhenTheCircuitCloses(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 50, BreakDuration: time.Second, Limit: breaker.LimitPolicy{Max: 300}})
	for range 30 {
		h.round(100, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(100 * time.Millisecond)
	}
	healthy := h.limit().Limit
	for range 8 {
		h.round(20, 1, breaker.Online, 500*time.Millisecond, 0, true) // drops: the limit contracts
	}
	h.calls(breaker.Failure, 50)
	h.wantState(breaker.Open)
	if low := h.limit().Limit; low >= healthy/4 {
		t.Fatalf("after drops the limit is %d (healthy %d), want contracted", low, healthy)
	}
	h.clock.Advance(2 * time.Second)
	h.call(breaker.Success) // the probe closes the circuit
	h.wantState(breaker.Closed)
	if got := h.limit().Limit; got < healthy {
		t.Fatalf("after recovery the limit is %d, want back to its healthy %d", got, healthy)
	}
}

// A cold start whose first wave is dropped contracts the limit; answers without drops
// let it explore back up before the baseline exists.
func TestLimitExploresUpDuringWarmUp(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 400})
	h.round(200, 1, breaker.Online, 500*time.Millisecond, 0, true) // a cold first wave, all dropped
	h.round(200, 1, breaker.Online, 500*time.Millisecond, 0, true)
	h.clock.Advance(100 * time.Millisecond)
	h.round(2, 1, breaker.Online, 50*time.Millisecond, breaker.Success, false) // closes the window of drops
	low := h.limit().Limit
	if low >= 400 || h.limit().Ready {
		t.Fatalf("after two dropped waves: %+v, want a contracted limit and no baseline", h.limit())
	}
	for range 3 { // slow answers, fewer than the baseline needs
		h.round(2, 1, breaker.Online, 50*time.Millisecond, breaker.Success, false)
		h.round(low, 1, breaker.Online, 100*time.Millisecond, 0, false) // in flight, cancelled
		h.clock.Advance(100 * time.Millisecond)
	}
	if got := h.limit(); got.Limit <= low {
		t.Fatalf("answers without drops during warm-up: limit %d, want above %d", got.Limit, low)
	}
}

// A broker slowed by a constant delay, every answer inside the callers' deadlines,
// keeps its goodput: 500 calls a second at 1ms keep about one call in flight, at
// 300ms about 150 (Little's law), and latency alone must not refuse them. Drops of a
// first wave (channels being opened at the slow pace) contract the limit; windows
// without drops give it back.
func TestLimitSlowButAnsweringKeepsItsThroughput(t *testing.T) {
	h := limited(t, breaker.RecommendedLimit())
	for range 300 { // 5 calls every 10ms at 1ms: 500 a second
		h.round(5, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(9 * time.Millisecond)
	}
	// 300ms: the first waves lose most calls to their deadlines.
	for range 3 {
		h.round(150, 1, breaker.Online, 150*time.Millisecond, 0, true)
		h.round(15, 1, breaker.Online, 150*time.Millisecond, breaker.Success, false)
	}
	if s := h.limit(); s.Limit >= 150 {
		t.Fatalf("after dropped waves: %+v, want the limit contracted below 150", s)
	}
	refused := 0
	for i := range 50 { // then 150 in flight, every answer in 300ms
		n := h.round(150, 1, breaker.Online, 300*time.Millisecond, breaker.Success, false)
		if i >= 10 {
			refused += n
		}
	}
	if s := h.limit(); refused != 0 {
		t.Fatalf("a slow broker answering every call: %d refused after 10 rounds (%+v), want none", refused, s)
	}
}

// Answering: a success within the last second, and at least a quarter of the last
// window's calls succeeded. A window of misses, or a second without a success, ends it.
func TestLimitAnsweringNeedsARecentSuccessAndAGoodShare(t *testing.T) {
	h := limited(t, breaker.RecommendedLimit())
	lim := h.b.Limiter()
	if lim.Answering() || lim.Answered() {
		t.Fatal("a limit that has seen no call says the dependency answers")
	}
	// window runs the calls of one window (within 10ms), then closes it with one
	// more call of outcome closer after the window's 100ms.
	window := func(successes, drops int, closer breaker.Outcome) {
		h.round(successes, 1, breaker.Online, 5*time.Millisecond, breaker.Success, false)
		h.round(drops, 1, breaker.Online, 5*time.Millisecond, 0, true)
		h.clock.Advance(100 * time.Millisecond)
		h.round(1, 1, breaker.Online, 0, closer, closer != breaker.Success)
	}
	window(20, 0, breaker.Success)
	if !lim.Answering() {
		t.Fatal("after a window of successes: not answering")
	}
	window(5, 15, breaker.Success) // 6 of 21 succeeded
	if !lim.Answering() {
		t.Fatal("after a window in which more than a quarter succeeded: not answering")
	}
	window(4, 15, breaker.Failure) // 4 of 20
	if lim.Answering() || !lim.Answered() {
		t.Fatalf("after a window in which a fifth succeeded: answering %v, answered %v; want false, true", lim.Answering(), lim.Answered())
	}
	window(20, 0, breaker.Success)
	if !lim.Answering() {
		t.Fatal("after a window of successes again: not answering")
	}
	h.clock.Advance(1100 * time.Millisecond)
	if lim.Answering() || lim.Answered() {
		t.Fatal("more than a second after the last success: still answering")
	}
}

// A Failure completed with its error (CompleteWith, what Guard does) gives the
// permit's messages back to the limit, as Complete does: failures must not leak the
// limit away until every call is refused.
func TestLimitFailureWithErrorGivesTheSlotBack(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 10})
	for range 3 {
		var ps []breaker.Permit
		for range 10 {
			p, err := h.b.AcquireRequest(t.Context(), breaker.Request{})
			if err != nil {
				t.Fatalf("call within the limit refused: %v", err)
			}
			ps = append(ps, p)
		}
		for _, p := range ps {
			p.CompleteWith(breaker.Failure, errors.New("broker said no"))
		}
		if s := h.limit(); s.InFlight != 0 {
			t.Fatalf("after 10 failures completed with their error: %d messages still in flight", s.InFlight)
		}
	}
}
