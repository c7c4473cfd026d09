package admission_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
)

// Cold holds until a call ends with a verdict: an Ignored release leaves it cold.
func TestLimiterColdUntilAVerdict(t *testing.T) {
	for _, r := range []admission.Result{admission.Success, admission.Failure, admission.Dropped} {
		l := newLimiter(t, admission.LimitPolicy{Max: 3})
		if !l.lim.Cold() {
			t.Fatal("a new limiter is not cold")
		}
		l.calls(1, time.Millisecond, admission.Ignored)
		if !l.lim.Cold() {
			t.Fatal("an Ignored release warmed the limiter")
		}
		l.calls(1, time.Millisecond, r)
		if l.lim.Cold() {
			t.Fatalf("still cold after a %v", r)
		}
	}
}

// Answered keeps the time of the last success to the millisecond, written at most
// once a millisecond so that healthy traffic does not write it on every call: a
// success in the limiter's very first instant counts, a success less than a
// millisecond after the one kept is not written, one exactly a millisecond after it
// is, and a second without a success ends it.
func TestLimitAnsweredKeepsTheLastSuccessToTheMillisecond(t *testing.T) {
	first := newLimiter(t, admission.LimitPolicy{Max: 10})
	if first.lim.Answered() {
		t.Fatal("Answered before any call")
	}
	first.calls(1, 0, admission.Success)
	if !first.lim.Answered() {
		t.Fatal("not Answered after a success at the limiter's start")
	}

	l := newLimiter(t, admission.LimitPolicy{Max: 10})
	success := func() { l.calls(1, 0, admission.Success) }
	at := l.clock.Advance(time.Second)
	success()
	l.clock.Advance(time.Millisecond - 1)
	success() // within the millisecond: the first success stays the one kept
	l.clock.Set(at.Add(time.Second + 1))
	if l.lim.Answered() {
		t.Fatal("Answered a second and 1ns after the success kept: the one within its millisecond was written")
	}
	kept := l.clock.Now()
	success()
	l.clock.Advance(time.Millisecond)
	success() // exactly a millisecond later: written
	l.clock.Set(kept.Add(time.Second + time.Millisecond))
	if !l.lim.Answered() {
		t.Fatal("not Answered a second after a success a millisecond after the one kept")
	}
}

// Answering: a success within the last second, and at least a quarter of the last
// window's calls succeeded (exactly a quarter counts). A window of misses, or a second
// without a success, ends it.
func TestLimitAnsweringNeedsARecentSuccessAndAGoodShare(t *testing.T) {
	l := newLimiter(t, admission.DefaultPolicy().Limit)
	if l.lim.Answering() || l.lim.Answered() {
		t.Fatal("a limit that has seen no call says the destination answers")
	}
	// window runs the calls of one window (within 10ms), then closes it with one
	// more call of result closer after the window's 100ms.
	window := func(successes, drops int, closer admission.Result) {
		l.round(successes, 1, admission.Online, 5*time.Millisecond, admission.Success)
		l.round(drops, 1, admission.Online, 5*time.Millisecond, admission.Dropped)
		l.clock.Advance(100 * time.Millisecond)
		l.round(1, 1, admission.Online, 0, closer)
	}
	for _, c := range []struct {
		successes, drops int
		closer           admission.Result
		answering        bool
	}{
		{20, 0, admission.Success, true},
		{5, 15, admission.Success, true},  // 6 of 21
		{4, 15, admission.Failure, false}, // 4 of 20
		{20, 0, admission.Success, true},
	} {
		window(c.successes, c.drops, c.closer)
		if l.lim.Answering() != c.answering || !l.lim.Answered() {
			t.Fatalf("after a window of %d successes, %d drops and a %v: answering %v, answered %v; want %v, true",
				c.successes, c.drops, c.closer, l.lim.Answering(), l.lim.Answered(), c.answering)
		}
	}
	l.clock.Advance(1100 * time.Millisecond)
	if l.lim.Answering() || l.lim.Answered() {
		t.Fatal("more than a second after the last success: still answering")
	}

	quarter := newLimiter(t, admission.LimitPolicy{Max: 100, Window: 100 * time.Millisecond})
	slots := quarter.takeN(4, admission.Online)
	quarter.clock.Advance(100 * time.Millisecond)
	slots[0].Release(admission.Success)
	release(slots[1:], admission.Failure) // the window closes with the fourth
	quarter.wantLimit(62)                 // 100 * (1 - 0.5*3/4), rounded down
	if !quarter.lim.Answering() {
		t.Fatal("not Answering after a window in which one call of four succeeded")
	}
}

// Busy blames a deadline on this process's bulk work only while the destination
// answers (a success within the last second) and bulk work is in flight or was given
// back at most a second ago, counted from its release, not its admission.
func TestLimiterBusyNeedsAnAnswerAndRecentBulkWork(t *testing.T) {
	p := admission.LimitPolicy{Max: 10, BulkShare: 0.5}
	l := newLimiter(t, p)
	l.clock.Advance(time.Second)
	bulk := l.take(2, admission.Bulk)
	if l.lim.Busy() {
		t.Fatal("busy before the destination answered anything")
	}
	l.calls(1, 0, admission.Success)
	if !l.lim.Busy() {
		t.Fatal("not busy with bulk work in flight and an answer")
	}
	l.clock.Advance(2 * time.Second)
	l.calls(1, 0, admission.Success)
	bulk.Release(admission.Ignored) // bulk work ends now, two seconds after it began
	l.clock.Advance(500 * time.Millisecond)
	l.calls(1, 0, admission.Success)
	l.clock.Advance(500 * time.Millisecond)
	if !l.lim.Busy() {
		t.Fatal("not busy a second after bulk work ended")
	}
	l.clock.Advance(1)
	if l.lim.Busy() || !l.lim.Answered() {
		t.Fatalf("a second and 1ns after bulk work ended: busy %v answered %v, want false true", l.lim.Busy(), l.lim.Answered())
	}

	quiet := newLimiter(t, p)
	quiet.clock.Advance(time.Second)
	quiet.calls(1, 0, admission.Success)
	if quiet.lim.Busy() {
		t.Fatal("busy without any bulk work")
	}
}
