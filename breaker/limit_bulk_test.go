package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// warmBulk gives h's limit a 1ms baseline from healthy online calls.
func warmBulk(h *harness) {
	for range 20 {
		h.round(10, 1, breaker.Online, time.Millisecond, breaker.Success, false)
		h.clock.Advance(100 * time.Millisecond)
	}
}

// drainWindow is one window of a drain: bulk work takes its whole headroom, online
// calls answer in latency, and the window closes.
func drainWindow(h *harness, latency time.Duration) (onlineRefused int) {
	h.t.Helper()
	bulk, err := h.b.AcquireRequest(h.t.Context(), breaker.Request{Weight: max(h.b.Limiter().BulkHeadroom(), 1), Priority: breaker.Bulk})
	if err != nil {
		h.t.Fatalf("bulk call within its headroom: %v", err)
	}
	onlineRefused = h.round(10, 1, breaker.Online, latency, breaker.Success, false)
	bulk.Complete(breaker.Success)
	h.clock.Advance(100 * time.Millisecond)
	return onlineRefused
}

// Bulk work grows its budget while online calls are served well within their
// deadline, and gives it back, before online calls lose anything, once online
// latency passes a share of that deadline, which the limit learned from the online
// calls it saw dropped.
func TestBulkBudgetFollowsOnlineLatencyAgainstTheirDeadline(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 400, BulkShare: 0.5})
	warmBulk(h)
	// Two online calls miss their 500ms deadline: the budget halves, and the limit
	// now knows what the online calls' deadline is.
	h.round(2, 1, breaker.Online, 500*time.Millisecond, 0, true)
	h.round(10, 1, breaker.Online, time.Millisecond, breaker.Success, false)
	if s := h.limit(); s.BulkLimit > 100 {
		t.Fatalf("after a window of drops the bulk limit is %d, want at most half of 200", s.BulkLimit)
	}
	// A drain whose online latency stays at 50ms, a tenth of the deadline: the
	// budget grows back to its full share.
	for range 40 {
		if n := drainWindow(h, 50*time.Millisecond); n != 0 {
			t.Fatalf("online calls refused beside a drain: %d", n)
		}
	}
	limit := h.limit().Limit
	if s := h.limit(); s.BulkLimit != 200 {
		t.Fatalf("online latency at a tenth of the deadline: %+v, want the full bulk share 200", s)
	}
	// Online latency rises to 300ms, past 40 % of the deadline but inside it, while
	// the drain goes on: bulk work gives way, online calls keep their limit.
	for range 10 {
		if n := drainWindow(h, 300*time.Millisecond); n != 0 {
			t.Fatalf("online calls refused while bulk work gives way: %d", n)
		}
	}
	if s := h.limit(); s.BulkLimit > 40 || s.Limit < limit {
		t.Fatalf("online latency at 60 %% of the deadline beside a drain: %+v, want a bulk limit of at most 40 and the limit of %d kept", s, limit)
	}
}

// Without bulk work the same latency, far past the baseline, contracts the online
// limit as before: the rule above belongs to windows in which bulk work can give way.
func TestOnlineLimitContractsForLatencyWithoutBulkWork(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 400, BulkShare: 0.5})
	warmBulk(h)
	before := h.limit().Limit
	for range 10 {
		h.round(10, 1, breaker.Online, 300*time.Millisecond, breaker.Success, false)
	}
	if s := h.limit(); s.Limit >= before {
		t.Fatalf("online latency 300x its baseline, no bulk work: %+v, want a limit under %d", s, before)
	}
}

// Bulk messages in flight do not take online calls' room: with the bulk budget
// full, online calls still get the whole limit. Online calls filling the limit leave
// bulk work no headroom.
func TestBulkWorkDoesNotCrowdOutOnlineCalls(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5})
	ctx := t.Context()
	bulk, err := h.b.AcquireRequest(ctx, breaker.Request{Weight: 50, Priority: breaker.Bulk})
	if err != nil {
		t.Fatal(err)
	}
	var online []breaker.Permit
	for range 100 {
		p, err := h.b.AcquireRequest(ctx, breaker.Request{})
		if err != nil {
			t.Fatalf("online call %d beside 50 bulk messages: %v", len(online)+1, err)
		}
		online = append(online, p)
	}
	if _, err := h.b.AcquireRequest(ctx, breaker.Request{}); err == nil {
		t.Fatal("online call past the limit admitted")
	}
	bulk.Complete(breaker.Success)
	if got := h.b.Limiter().BulkHeadroom(); got != 0 {
		t.Fatalf("bulk headroom while online calls fill the limit: %d, want 0", got)
	}
	if _, err := h.b.AcquireRequest(ctx, breaker.Request{Priority: breaker.Bulk}); err == nil {
		t.Fatal("bulk call admitted while online calls fill the limit")
	}
	for _, p := range online {
		p.Complete(breaker.Success)
	}
	if got := h.b.Limiter().BulkHeadroom(); got != 50 {
		t.Fatalf("bulk headroom of an idle destination: %d, want 50", got)
	}
}

// A hung broker while a drain is in flight: the drops cut bulk work first, then the
// online limit contracts toward Min as it would without bulk work.
func TestHungBrokerBesideADrainContractsBothBudgets(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 500, Min: 2, BulkShare: 0.5})
	warmBulk(h)
	ctx := t.Context()
	for range 30 {
		bulk, err := h.b.AcquireRequest(ctx, breaker.Request{Weight: max(h.b.Limiter().BulkHeadroom(), 1), Priority: breaker.Bulk})
		if err != nil {
			t.Fatal(err)
		}
		h.round(100, 1, breaker.Online, 500*time.Millisecond, 0, true)
		bulk.Drop()
	}
	if s := h.limit(); s.BulkLimit > 1 || s.Limit > 4 {
		t.Fatalf("after 30 windows of drops beside a drain: %+v, want a bulk limit of 1 and a limit near Min 2", s)
	}
}

// A bulk caller with no headroom waits on BulkWake: it is closed when bulk work
// gives its messages back, not when an online call does.
func TestBulkWakeClosesWhenBulkWorkEnds(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 100, BulkShare: 0.5})
	ctx := t.Context()
	bulk, err := h.b.AcquireRequest(ctx, breaker.Request{Weight: 50, Priority: breaker.Bulk})
	if err != nil {
		t.Fatal(err)
	}
	wake := h.b.Limiter().BulkWake()
	online, err := h.b.AcquireRequest(ctx, breaker.Request{})
	if err != nil {
		t.Fatal(err)
	}
	online.Complete(breaker.Success)
	select {
	case <-wake:
		t.Fatal("BulkWake closed by an online call's end")
	default:
	}
	bulk.Complete(breaker.Success)
	select {
	case <-wake:
	default:
		t.Fatal("BulkWake not closed when the bulk call ended")
	}
	if next := h.b.Limiter().BulkWake(); next == wake {
		t.Fatal("BulkWake handed back the closed channel")
	}
}

// Online calls dropped beside a drain that can still give way cut the drain, not the
// online limit.
func TestOnlineDropsBesideADrainCutBulkWorkFirst(t *testing.T) {
	h := limited(t, breaker.LimitPolicy{Max: 400, BulkShare: 0.5})
	warmBulk(h)
	before := h.limit().Limit
	for range 3 {
		bulk, err := h.b.AcquireRequest(t.Context(), breaker.Request{Weight: max(h.b.Limiter().BulkHeadroom(), 1), Priority: breaker.Bulk})
		if err != nil {
			t.Fatal(err)
		}
		h.round(20, 1, breaker.Online, 500*time.Millisecond, 0, true)
		h.clock.Advance(100 * time.Millisecond)
		h.round(1, 1, breaker.Online, 500*time.Millisecond, 0, true) // closes the window of drops
		h.round(10, 1, breaker.Online, 100*time.Millisecond, breaker.Success, false)
		bulk.Complete(breaker.Success)
	}
	if s := h.limit(); s.BulkLimit > 50 || s.Limit != before {
		t.Fatalf("3 windows with online drops beside a drain: %+v, want a bulk limit well under 200 and the limit %d kept", s, before)
	}
}
