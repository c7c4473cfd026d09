package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// brkCompletion is one call a backend's Completer received.
type brkCompletion struct {
	info breaker.PermitInfo
	o    breaker.Outcome
	err  error
	with bool // through CompletePermitWith
}

// brkBackend is a Completer that records what its permits report.
type brkBackend struct{ got []brkCompletion }

func (c *brkBackend) CompletePermit(info breaker.PermitInfo, o breaker.Outcome) bool {
	c.got = append(c.got, brkCompletion{info: info, o: o})
	return o != breaker.Rejected
}

// brkErrBackend is a brkBackend that also takes the error of a failed call.
type brkErrBackend struct{ brkBackend }

func (c *brkErrBackend) CompletePermitWith(info breaker.PermitInfo, o breaker.Outcome, err error) bool {
	c.got = append(c.got, brkCompletion{info: info, o: o, err: err, with: true})
	return true
}

func (c *brkBackend) want(t *testing.T, want ...brkCompletion) {
	t.Helper()
	if len(c.got) != len(want) {
		t.Fatalf("backend got %+v, want %+v", c.got, want)
	}
	for i := range want {
		g, w := c.got[i], want[i]
		if g.info != w.info || g.o != w.o || g.with != w.with || !errors.Is(g.err, w.err) || (g.err == nil) != (w.err == nil) {
			t.Fatalf("completion %d: got %+v, want %+v", i, g, w)
		}
	}
	c.got = nil
}

// A backend's permit reports its first completion, with the info it was made with,
// through the right method: the error of a Failure reaches an ErrorCompleter, every
// other completion (other outcomes, a nil error, a plain Completer, Drop as Neutral)
// reaches CompletePermit, and later completions reach nothing.
func TestBackendPermitsReportTheirFirstCompletion(t *testing.T) {
	boom := errors.New("broker said no")
	info := breaker.PermitInfo{Generation: 7, Probe: true, Lease: 42}
	plain := breaker.PermitInfo{Generation: 3, Lease: 9}

	var eb brkErrBackend
	p := breaker.NewPermit(&eb, info)
	if !p.Probe() || p.Generation() != 7 || p.Bypass() {
		t.Fatalf("permit Probe %v Generation %d Bypass %v, want true 7 false", p.Probe(), p.Generation(), p.Bypass())
	}
	if !p.CompleteWith(breaker.Failure, boom) {
		t.Fatal("first CompleteWith returned false")
	}
	if p.CompleteWith(breaker.Failure, boom) || p.Complete(breaker.Success) || p.Drop() {
		t.Fatal("a second completion returned true")
	}
	eb.want(t, brkCompletion{info: info, o: breaker.Failure, err: boom, with: true})

	p = breaker.NewPermit(&eb, plain)
	if p.Probe() {
		t.Fatal("a permit made without Probe is a probe")
	}
	p.CompleteWith(breaker.Failure, nil)
	eb.want(t, brkCompletion{info: plain, o: breaker.Failure})
	breaker.NewPermit(&eb, plain).CompleteWith(breaker.Success, boom)
	eb.want(t, brkCompletion{info: plain, o: breaker.Success})

	var b brkBackend
	p = breaker.NewPermit(&b, info)
	if !p.CompleteWith(breaker.Failure, boom) || p.CompleteWith(breaker.Failure, boom) {
		t.Fatal("CompleteWith on a plain Completer: want true once")
	}
	b.want(t, brkCompletion{info: info, o: breaker.Failure})

	p = breaker.NewPermit(&b, plain)
	if !p.Drop() || p.Drop() || p.Complete(breaker.Success) {
		t.Fatal("Drop: want true once, then nothing")
	}
	b.want(t, brkCompletion{info: plain, o: breaker.Neutral})
	if breaker.NewPermit(&b, plain).Complete(breaker.Rejected) {
		t.Fatal("Complete returned true where the backend said false")
	}
	b.want(t, brkCompletion{info: plain, o: breaker.Rejected})
}

// A backend's permit given a slot of its own Limiter gives the slot back on its
// first completion, whichever way it completes (a Drop counting as a drop, not an
// answer), then reports to the backend; a later completion gives nothing back twice.
func TestBackendPermitWithSlotReleasesItOnce(t *testing.T) {
	clock := fakeclock.New(t0)
	lim := breaker.NewLimiter("backend", breaker.LocalProcess, breaker.LimitPolicy{Max: 10}, clock)
	boom := errors.New("down")
	info := breaker.PermitInfo{Generation: 2, Lease: 5}
	slot := func(w int) breaker.LimitSlot {
		t.Helper()
		s, err := lim.Acquire(breaker.Request{Weight: w})
		if err != nil || !s.Held() {
			t.Fatalf("Acquire: %v (held %v)", err, s.Held())
		}
		return s
	}
	inFlight := func(want int) {
		t.Helper()
		if got := lim.Stats().InFlight; got != want {
			t.Fatalf("in flight %d, want %d", got, want)
		}
	}
	if (breaker.LimitSlot{}).Held() {
		t.Fatal("the zero slot is held")
	}

	var b brkErrBackend
	p := breaker.NewPermit(&b, info).WithSlot(slot(3))
	inFlight(3)
	if !lim.Cold() {
		t.Fatal("a limiter nothing completed on is not cold")
	}
	clock.Advance(time.Millisecond)
	if !p.Drop() || p.Drop() {
		t.Fatal("Drop: want true once")
	}
	inFlight(0)
	b.want(t, brkCompletion{info: info, o: breaker.Neutral})
	if lim.Cold() || lim.Answered() {
		t.Fatalf("after a drop: cold %v answered %v, want false false", lim.Cold(), lim.Answered())
	}

	p = breaker.NewPermit(&b, info).WithSlot(slot(2))
	if !p.CompleteWith(breaker.Failure, boom) || p.Complete(breaker.Success) {
		t.Fatal("CompleteWith: want true once")
	}
	inFlight(0)
	b.want(t, brkCompletion{info: info, o: breaker.Failure, err: boom, with: true})
	if lim.Answered() {
		t.Fatal("a failure answered")
	}

	p = breaker.NewPermit(&b, info).WithSlot(slot(1))
	if !p.Complete(breaker.Success) || p.Complete(breaker.Success) {
		t.Fatal("Complete: want true once")
	}
	inFlight(0)
	b.want(t, brkCompletion{info: info, o: breaker.Success})
	if !lim.Answered() {
		t.Fatal("a success did not answer")
	}

	// A zero slot changes nothing: the permit completes as a plain one.
	p = breaker.NewPermit(&b, info).WithSlot(breaker.LimitSlot{})
	p.Complete(breaker.Success)
	b.want(t, brkCompletion{info: info, o: breaker.Success})
	inFlight(0)
}

// Only Success and Failure are evidence about the dependency.
func TestOnlySuccessAndFailureCount(t *testing.T) {
	for o, want := range map[breaker.Outcome]bool{
		breaker.Success: true, breaker.Failure: true,
		breaker.Neutral: false, breaker.Rejected: false, breaker.Unusable: false,
	} {
		if o.Counts() != want {
			t.Errorf("%v.Counts() = %v, want %v", o, o.Counts(), want)
		}
	}
}

// WithSlot attaches a slot only to a backend's permit: the zero Permit and a
// Breaker's own permit come back unchanged, and completing them leaves the slot held.
func TestWithSlotLeavesOtherPermitsAlone(t *testing.T) {
	lim := breaker.NewLimiter("backend", breaker.LocalProcess, breaker.LimitPolicy{Max: 10}, fakeclock.New(t0))
	slot, err := lim.Acquire(breaker.Request{Weight: 2})
	if err != nil {
		t.Fatal(err)
	}
	if (breaker.Permit{}).WithSlot(slot).Complete(breaker.Success) {
		t.Fatal("the zero Permit with a slot completed as live")
	}
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	if !h.acquire().WithSlot(slot).Complete(breaker.Success) {
		t.Fatal("a Breaker's permit given a slot did not complete as its own")
	}
	if got := lim.Stats().InFlight; got != 2 {
		t.Fatalf("the slot's messages in flight %d, want still 2", got)
	}
}
