package breaker_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

const rampTime = 10 * time.Second

var rampPolicy = breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, RampDuration: rampTime}

// recover opens the circuit, waits out the break and closes it with one probe: the
// ramp starts at the returned time.
func (h *harness) recover(threshold int) time.Time {
	h.t.Helper()
	h.open(threshold)
	h.clock.Advance(h.b.Policy().BreakDuration)
	if p := h.acquire(); !p.Probe() || !p.Complete(breaker.Success) {
		h.t.Fatal("the probe after the break did not close the circuit")
	}
	h.wantState(breaker.Closed)
	return h.clock.Now()
}

// offer makes n calls now, completing the admitted ones with o, and returns how many
// were admitted and the ramp refusals of the others.
func (h *harness) offer(n int, o breaker.Outcome) (admitted int, refusals []*breaker.OpenError) {
	h.t.Helper()
	for range n {
		p, err := h.b.Acquire(context.Background())
		if err != nil {
			var oe *breaker.OpenError
			if !errors.As(err, &oe) || !oe.Ramping || !isRampRefusal(err) || !errors.Is(err, breaker.ErrOpen) {
				h.t.Fatalf("refusal %v is not a ramp's *OpenError", err)
			}
			refusals = append(refusals, oe)
			continue
		}
		admitted++
		p.Complete(o)
	}
	return admitted, refusals
}

func TestRampShareFollowsEnvoysSlowStart(t *testing.T) {
	for _, tc := range []struct {
		floor, aggression float64
		since             time.Duration
		want              float64
	}{
		{0, 0, 0, 0.1}, // the default floor
		{0, 0, rampTime / 2, 0.5},
		{0, 1, rampTime / 4, 0.25},
		{0, 2, rampTime / 4, 0.5},     // faster at first: sqrt
		{0, 0.5, rampTime / 2, 0.25},  // slower at first: square
		{0.3, 0.5, rampTime / 2, 0.3}, // held at the floor
		{0.2, 0, -time.Second, 0.2},   // a clock before the close
		{0, 0, rampTime, 1},           // over
		{0, 0, rampTime - time.Nanosecond, 1 - 1e-10},
	} {
		p := rampPolicy
		p.RampFloor, p.RampAggression = tc.floor, tc.aggression
		if got := backend.RampShare(p, tc.since); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("floor %v aggression %v at %v: share %v, want %v", tc.floor, tc.aggression, tc.since, got, tc.want)
		}
	}
	if got := backend.RampShare(breaker.Policy{}, 0); got != 1 {
		t.Errorf("a policy without a ramp admits a share of %v", got)
	}
}

// The admitted share of each tenth of the ramp is the schedule's, to within a few calls.
func TestRampAdmitsTheScheduledShare(t *testing.T) {
	for _, aggression := range []float64{1, 3, 0.4} {
		p := rampPolicy
		p.RampAggression = aggression
		h := newHarness(t, p)
		start := h.recover(3)
		const perStep, steps = 1000, 10
		for i := range steps {
			at := time.Duration(i) * rampTime / steps
			h.clock.Set(start.Add(at))
			want := backend.RampShare(p, at) * perStep
			got, _ := h.offer(perStep, breaker.Success)
			if math.Abs(float64(got)-want) > 3 {
				t.Errorf("aggression %v, %v into the ramp: admitted %d of %d, want %.0f", aggression, at, got, perStep, want)
			}
			if s := h.b.Snapshot(); !s.RampUntil.Equal(start.Add(rampTime)) || s.RampShare != backend.RampShare(p, at) {
				t.Errorf("snapshot during the ramp: RampUntil %v RampShare %v", s.RampUntil, s.RampShare)
			}
		}
		h.clock.Set(start.Add(rampTime))
		if got, _ := h.offer(perStep, breaker.Success); got != perStep {
			t.Errorf("after the ramp: admitted %d of %d", got, perStep)
		}
		if s := h.b.Snapshot(); !s.RampUntil.IsZero() || s.RampShare != 1 {
			t.Errorf("snapshot after the ramp: RampUntil %v RampShare %v", s.RampUntil, s.RampShare)
		}
	}
}

// A refusal spreads callers over the next eighth of the ramp, changes no evidence and
// is counted.
func TestRampRefusalSpreadsCallersAndChangesNothing(t *testing.T) {
	h := newHarness(t, rampPolicy)
	start := h.recover(3)
	h.clock.Advance(rampTime / 4)
	now := h.clock.Now()
	for { // one failure: evidence the refusals must not touch
		if p, err := h.b.Acquire(context.Background()); err == nil {
			p.Complete(breaker.Failure)
			break
		}
	}
	before := h.b.Snapshot()
	admitted, refusals := h.offer(1000, breaker.Neutral)
	after := h.b.Snapshot()
	if after.Failures != before.Failures || after.Generation != before.Generation || after.State != breaker.Closed {
		t.Fatalf("refusals changed the circuit: %+v -> %+v", before, after)
	}
	if got := after.RampRefused - before.RampRefused; got != uint64(len(refusals)) || admitted+len(refusals) != 1000 {
		t.Fatalf("RampRefused moved by %d for %d refusals", got, len(refusals))
	}
	distinct := map[time.Time]int{}
	for _, oe := range refusals {
		if !oe.NotBefore.After(now) || oe.NotBefore.After(now.Add(rampTime/8)) {
			t.Fatalf("NotBefore %v outside (now, now+%v]", oe.NotBefore.Sub(start), rampTime/8)
		}
		distinct[oe.NotBefore]++
	}
	// 16 slots; each should hold about 1/16 of the refusals.
	if len(distinct) != 16 {
		t.Fatalf("refusals spread over %d NotBefore values, want 16", len(distinct))
	}
	for at, n := range distinct {
		if want := len(refusals) / 16; n < want/2 || n > want*2 {
			t.Errorf("%d refusals come back at %v, want about %d", n, at.Sub(now), want)
		}
	}
	if msg := refusals[0].Error(); msg[:29] != "breaker: circuit ramping up: " {
		t.Errorf("message %q", msg)
	}
}

// A failure during the ramp counts as in closed; reopening ends the ramp, and the next
// recovery ramps from the floor again.
func TestRampFailuresCountAndReopeningEndsTheRamp(t *testing.T) {
	h := newHarness(t, rampPolicy)
	start := h.recover(3)
	h.clock.Set(start.Add(rampTime / 2))
	failures := 0
	for failures < 3 {
		p, err := h.b.Acquire(context.Background())
		if err != nil {
			continue
		}
		p.Complete(breaker.Failure)
		failures++
	}
	h.wantState(breaker.Open)
	if s := h.b.Snapshot(); !s.RampUntil.IsZero() || s.RampShare != 1 {
		t.Fatalf("an open circuit reports a ramp: %+v", s)
	}
	h.clock.Advance(time.Second)
	h.acquire().Complete(breaker.Success)
	if got, _ := h.offer(1000, breaker.Success); got < 90 || got > 110 {
		t.Fatalf("the second recovery admitted %d of 1000 at first, want the 10%% floor", got)
	}
	want := []string{"closed>open:failure_threshold", "open>half-open:break_elapsed", "half-open>closed:probe_succeeded",
		"closed>open:failure_threshold", "open>half-open:break_elapsed", "half-open>closed:probe_succeeded"}
	if got := h.reasons(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

// Overrides bypass the ramp: ForceClose admits everything, and neither the circuit it
// leaves nor a cleared ForceClose ramps. A ForceOpen recovers through a probe, so it
// ramps.
func TestRampAndOverrides(t *testing.T) {
	h := newHarness(t, rampPolicy)
	h.recover(3)
	h.b.ForceClose(h.clock.Now().Add(time.Second))
	if got, _ := h.offer(100, breaker.Success); got != 100 {
		t.Fatalf("ForceClose during the ramp admitted %d of 100", got)
	}
	h.clock.Advance(time.Second)
	if got, _ := h.offer(100, breaker.Success); got != 100 {
		t.Fatalf("after ForceClose expired %d of 100 were admitted", got)
	}
	h.b.ForceClose(h.clock.Now().Add(time.Hour))
	h.b.ClearOverride()
	if got, _ := h.offer(100, breaker.Success); got != 100 {
		t.Fatalf("after ForceClose was cleared %d of 100 were admitted", got)
	}
	h.b.ForceOpen(h.clock.Now().Add(time.Hour))
	h.b.ClearOverride()
	h.acquire().Complete(breaker.Success)
	if got, _ := h.offer(100, breaker.Success); got > 20 {
		t.Fatalf("the recovery after a ForceOpen admitted %d of 100, want the floor", got)
	}
}

// With MaxInFlight, the in-flight bound rises with the share; calls over the ramp's
// bound get the ramp's refusal, calls over MaxInFlight ErrSaturated.
func TestRampRaisesTheInFlightBound(t *testing.T) {
	p := rampPolicy
	p.MaxInFlight = 20
	h := newHarness(t, p)
	start := h.recover(3)
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{{0, 2}, {rampTime / 4, 5}, {rampTime / 2, 10}, {rampTime, 20}} {
		h.clock.Set(start.Add(tc.at))
		var held []breaker.Permit
		var sawRamp bool
		for range 200 {
			pm, err := h.b.Acquire(context.Background())
			switch {
			case err == nil:
				held = append(held, pm)
			case isRampRefusal(err):
				sawRamp = true
			case errors.Is(err, breaker.ErrSaturated):
				if len(held) != 20 {
					t.Fatalf("ErrSaturated with %d in flight", len(held))
				}
			default:
				t.Fatal(err)
			}
		}
		if len(held) != tc.want || sawRamp != (tc.want < 20) {
			t.Errorf("%v into the ramp: %d in flight (ramp refusals: %v), want %d", tc.at, len(held), sawRamp, tc.want)
		}
		for _, pm := range held {
			pm.Complete(breaker.Success)
		}
	}
	if s := h.b.Snapshot(); s.InFlight != 0 {
		t.Fatalf("in flight %d after all completed", s.InFlight)
	}
}

// Shadow admits what the ramp would refuse, as a bypass, and counts it both ways.
func TestRampUnderShadow(t *testing.T) {
	p := rampPolicy
	p.Mode = breaker.Shadow
	var hooked atomic.Int64
	h := newHarness(t, p, breaker.WithBypassHook(func(bp breaker.Bypass) {
		if isRampRefusal(bp.Err) && bp.State == breaker.Closed {
			hooked.Add(1)
		}
	}))
	h.recover(3)
	if got, _ := h.offer(100, breaker.Success); got != 100 {
		t.Fatalf("Shadow admitted %d of 100", got)
	}
	if s := h.b.Snapshot(); s.RampRefused < 85 || s.RampRefused > 95 || s.Bypassed != s.RampRefused || hooked.Load() != int64(s.RampRefused) {
		t.Fatalf("RampRefused %d Bypassed %d hooked %d, want about 90 each", s.RampRefused, s.Bypassed, hooked.Load())
	}
}

// countingClock counts its readings.
type countingClock struct {
	*fakeclock.Clock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time { c.reads.Add(1); return c.Clock.Now() }

// Ramping admission reads the clock once and allocates nothing; once the ramp is
// over the circuit is back on the closed hot path, which reads no clock.
func TestRampCostsOneClockReadThenNone(t *testing.T) {
	clock := &countingClock{Clock: fakeclock.New(t0)}
	p := rampPolicy
	p.RampFloor = 0.5
	b, err := breaker.New("cost", p, breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		pm, _ := b.Acquire(context.Background())
		pm.Complete(breaker.Failure)
	}
	clock.Advance(time.Second)
	pm, _ := b.Acquire(context.Background())
	pm.Complete(breaker.Success)
	ctx := context.Background()
	call := func() {
		if pm, err := b.Acquire(ctx); err == nil {
			pm.Complete(breaker.Success)
		}
	}
	call() // warm the refusal cache for this instant
	call()
	before := clock.reads.Load()
	allocs := testing.AllocsPerRun(1000, call)
	if reads := clock.reads.Load() - before; reads != 1001 {
		t.Errorf("%d clock reads for 1001 ramping calls, want one each", reads)
	}
	if allocs != 0 {
		t.Errorf("ramping admission allocates %v per call", allocs)
	}
	clock.Advance(rampTime)
	call() // the first call after the ramp puts the circuit back on the hot path
	before = clock.reads.Load()
	if allocs := testing.AllocsPerRun(1000, call); allocs != 0 {
		t.Errorf("the closed path after the ramp allocates %v per call", allocs)
	}
	if reads := clock.reads.Load() - before; reads != 0 {
		t.Errorf("the closed path after the ramp read the clock %d times", reads)
	}
}

func TestRampPolicyValidation(t *testing.T) {
	for _, tc := range []struct {
		p     breaker.Policy
		field string
	}{
		{breaker.Policy{RampDuration: -1}, "RampDuration"},
		{breaker.Policy{RampDuration: time.Microsecond}, "RampDuration"},
		{breaker.Policy{RampDuration: time.Second, RampFloor: 1.5}, "RampFloor"},
		{breaker.Policy{RampDuration: time.Second, RampFloor: math.NaN()}, "RampFloor"},
		{breaker.Policy{RampFloor: 0.2}, "RampFloor"},
		{breaker.Policy{RampDuration: time.Second, RampAggression: -1}, "RampAggression"},
		{breaker.Policy{RampDuration: time.Second, RampAggression: math.Inf(1)}, "RampAggression"},
		{breaker.Policy{RampAggression: 2}, "RampAggression"},
	} {
		var pe *breaker.PolicyError
		if err := tc.p.Validate(); !errors.As(err, &pe) || pe.Field != tc.field {
			t.Errorf("%+v: got %v, want an error naming %s", tc.p, err, tc.field)
		}
	}
	if err := (breaker.Policy{RampDuration: time.Millisecond, RampFloor: 1, RampAggression: 0.1}).Validate(); err != nil {
		t.Errorf("a valid ramp refused: %v", err)
	}
}

func TestRampFingerprint(t *testing.T) {
	base := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}
	ramp := base
	ramp.RampDuration = time.Minute
	spelled := ramp
	spelled.RampFloor, spelled.RampAggression = 0.1, 1
	if backend.Fingerprint(ramp) == backend.Fingerprint(base) || backend.Fingerprint(spelled) != backend.Fingerprint(ramp) {
		t.Fatal("the ramp is not in the fingerprint, or its defaults change it")
	}
	seen := map[string]bool{backend.Fingerprint(ramp): true}
	for _, f := range []func(*breaker.Policy){
		func(p *breaker.Policy) { p.RampDuration = time.Hour },
		func(p *breaker.Policy) { p.RampFloor = 0.2 },
		func(p *breaker.Policy) { p.RampAggression = 2 },
	} {
		p := ramp
		f(&p)
		if seen[backend.Fingerprint(p)] {
			t.Errorf("%+v fingerprints like another ramp", p)
		}
		seen[backend.Fingerprint(p)] = true
	}
}

// TestRampModel drives one circuit with random outcomes, clock moves and overrides
// from one goroutine, and checks the ramp against the snapshot before every call: a
// ramp exists only after a close from half-open and only for RampDuration, it alone
// refuses calls of a closed circuit, a refusal changes no evidence, and the calls it
// admits add up to the scheduled share.
func TestRampModel(t *testing.T) {
	for seed := range uint64(4) {
		p := breaker.Policy{FailureThreshold: 4, BreakDuration: 20 * time.Millisecond, RampDuration: 200 * time.Millisecond,
			RampAggression: []float64{1, 2, 0.5, 1}[seed], RampFloor: []float64{0, 0.05, 0.2, 1}[seed]}
		h := newHarness(t, p)
		r := rand.New(rand.NewPCG(seed, 11))
		var offered, admitted int
		var expected float64
		for range 50000 {
			switch r.IntN(400) {
			case 0:
				h.b.ForceClose(h.clock.Now().Add(time.Duration(r.IntN(50)) * time.Millisecond))
			case 1:
				h.b.ForceOpen(h.clock.Now().Add(time.Duration(r.IntN(50)) * time.Millisecond))
			case 2:
				h.b.ClearOverride()
			}
			h.clock.Advance(time.Duration(r.IntN(200)) * time.Microsecond)
			before := h.b.Snapshot()
			if !before.RampUntil.IsZero() {
				last := h.seen[len(h.seen)-1]
				if last.Reason != breaker.ReasonProbeSucceeded || !before.RampUntil.Equal(last.At.Add(p.RampDuration)) ||
					!h.clock.Now().Before(before.RampUntil) || before.Override != breaker.NoOverride {
					t.Fatalf("a ramp until %v after %+v at %v", before.RampUntil, last, h.clock.Now())
				}
				offered++
				expected += before.RampShare
			}
			pm, err := h.b.Acquire(context.Background())
			if isRampRefusal(err) {
				after := h.b.Snapshot()
				if before.RampUntil.IsZero() || after.Generation != before.Generation || after.Failures != before.Failures {
					t.Fatalf("ramp refusal: %+v -> %+v", before, after)
				}
				continue
			}
			if err != nil {
				if before.State == breaker.Closed && before.Override != breaker.ForcedOpen && !errors.Is(err, breaker.ErrOpen) {
					t.Fatalf("unexpected refusal %v", err)
				}
				continue
			}
			if !before.RampUntil.IsZero() && before.State == breaker.Closed {
				admitted++
			}
			pm.Complete([]breaker.Outcome{breaker.Success, breaker.Success, breaker.Success, breaker.Success, breaker.Failure, breaker.Neutral}[r.IntN(6)])
		}
		if offered < 1000 || math.Abs(float64(admitted)-expected) > 0.02*float64(offered)+10 {
			t.Errorf("seed %d: %d of %d ramping calls admitted, schedule says %.0f", seed, admitted, offered, expected)
		}
		t.Logf("seed %d: %d transitions; %d of %d ramping calls admitted, schedule says %.0f", seed, len(h.seen), admitted, offered, expected)
	}
}

// FuzzRampPolicy checks that a ramp policy either fails validation naming a ramp field
// or gives a share within [floor, 1] that never falls as time passes.
func FuzzRampPolicy(f *testing.F) {
	f.Add(int64(time.Second), 0.0, 0.0, int64(0), int64(time.Millisecond))
	f.Add(int64(time.Minute), 0.3, 2.5, int64(time.Second), int64(30*time.Second))
	f.Fuzz(func(t *testing.T, dur int64, floor, aggression float64, a, b int64) {
		p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second,
			RampDuration: time.Duration(dur), RampFloor: floor, RampAggression: aggression}
		if err := p.Validate(); err != nil {
			var pe *breaker.PolicyError
			if !errors.As(err, &pe) || pe.Field[:4] != "Ramp" {
				t.Fatalf("Validate returned %v, not a *PolicyError naming a ramp field", err)
			}
			return
		}
		lo, hi := time.Duration(min(a, b)), time.Duration(max(a, b))
		sl, sh := backend.RampShare(p, lo), backend.RampShare(p, hi)
		least := backend.Normalize(p).RampFloor
		if p.RampDuration == 0 {
			least = 1
		}
		if math.IsNaN(sl) || sl < least || sh > 1 || sh < sl {
			t.Fatalf("%+v: share %v at %v, %v at %v", p, sl, lo, sh, hi)
		}
		if _, err := breaker.New("fuzz", p); err != nil {
			t.Fatalf("valid policy refused by New: %v", err)
		}
	})
}

// A ramp admits a call when its point of the sequence lies below share*2^64, so that
// exactly the share of the 2^64 points is admitted: the point at the bound itself is
// refused. With a share of 0.5 the bound is 2^63, the point of call number 2^63.
func TestRampRefusesThePointAtItsBound(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute, RampFloor: 0.5}
	// The first call is number seed+1 = 2^63; its point is 2^63*golden = 2^63 (golden is odd).
	r := backend.NewRamp("kafka:orders", p, t0, 1<<63-1)
	if share, refusal := r.Admit(0); share != 0.5 || refusal == nil {
		t.Fatalf("Admit of the point 2^63 at a share of 0.5: share %v refusal %v, want refused", share, refusal)
	}
	// The next call's point, (2^63+1)*golden = golden - 2^63 mod 2^64, lies below the
	// bound: admitted.
	if share, refusal := r.Admit(0); share != 0.5 || refusal != nil {
		t.Fatalf("Admit of the point 2^63+golden: share %v refusal %v, want admitted", share, refusal)
	}
}

// A Ramp's refusal comes back within the next eighth of the ramp even for the call
// whose point of the sequence is the very last one (2^64-1): it takes the last of the
// 16 slots, not one past them.
func TestRampRefusalOfTheLastPointStaysInTheEighth(t *testing.T) {
	const golden = 0x9E3779B97F4A7C15 // the Ramp's step, as documented on its seq
	inv := uint64(golden)             // golden's inverse modulo 2^64, by Newton's iteration
	for range 6 {
		inv *= 2 - golden*inv
	}
	if inv*golden != 1 {
		t.Fatalf("inverse %#x of golden is wrong", inv)
	}
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: 128 * time.Second, RampFloor: 0.1}
	// The first call is number seed+1 = -inv, whose point is -inv*golden = 2^64-1.
	r := backend.NewRamp("kafka:orders", p, t0, ^inv)
	since := 10 * time.Second
	share, refusal := r.Admit(since)
	if share >= 1 || refusal == nil {
		t.Fatalf("Admit of the last point: share %v refusal %v, want refused", share, refusal)
	}
	if off := refusal.NotBefore.Sub(t0); off <= since || off > since+16*time.Second {
		t.Fatalf("NotBefore %v after the close, want within (%v, %v]", off, since, since+16*time.Second)
	}
}

// A Ramp's refusals come back on slot boundaries (RampDuration/128 apart) within the
// next eighth of the ramp, one shared error per slot; a call past the ramp is
// admitted with share 1; Until is the close plus RampDuration.
func TestRampRefusalsShareOneErrorPerSlot(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: 128 * time.Second, RampFloor: 0.1}
	r := backend.NewRamp("kafka:orders", p, t0, 7)
	if !r.Until().Equal(t0.Add(128 * time.Second)) {
		t.Fatalf("Until %v", r.Until())
	}
	if share, refusal := r.Admit(128 * time.Second); share != 1 || refusal != nil {
		t.Fatalf("Admit at the end of the ramp: %v %v, want 1 and admitted", share, refusal)
	}
	since := 10*time.Second + 500*time.Millisecond
	bySlot := map[time.Time]*breaker.OpenError{}
	check := func(oe *breaker.OpenError) {
		t.Helper()
		off := oe.NotBefore.Sub(t0)
		if off%time.Second != 0 || off <= since || off > since+16*time.Second || !isRampRefusal(oe) || oe.Identity != "kafka:orders" {
			t.Fatalf("refusal %+v: want a ramp refusal on a 1s boundary within (%v, %v]", oe, since, since+16*time.Second)
		}
		if prev, ok := bySlot[oe.NotBefore]; ok && prev != oe {
			t.Fatalf("two errors for the slot at %v", off)
		}
		bySlot[oe.NotBefore] = oe
	}
	refused := 0
	for range 400 {
		share, refusal := r.Admit(since)
		if share != backend.RampShare(p, since) {
			t.Fatalf("share %v, want %v", share, backend.RampShare(p, since))
		}
		if refusal != nil {
			refused++
			check(refusal)
		}
	}
	if want := 400 * (1 - backend.RampShare(p, since)); float64(refused) < want-8 || float64(refused) > want+8 {
		t.Fatalf("%d of 400 refused, want about %.0f", refused, want)
	}
	for range 200 {
		check(r.Refuse(since))
	}
	if len(bySlot) != 16 {
		t.Fatalf("refusals over %d slots, want 16", len(bySlot))
	}
}

// Refuse (a call turned away by the in-flight bound that rises with the ramp) spreads
// its refusals over the next eighth of the ramp like Admit's, so that the callers it
// turns away do not all come back at one time.
func TestRampRefuseSpreadsItsRefusals(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: 128 * time.Second, RampFloor: 0.1}
	r := backend.NewRamp("kafka:orders", p, t0, 0)
	since := 10 * time.Second
	seen := map[time.Time]bool{}
	for range 32 {
		e := r.Refuse(since)
		if off := e.NotBefore.Sub(t0); off <= since || off > since+16*time.Second {
			t.Fatalf("NotBefore %v after the close, want within (%v, %v]", off, since, since+16*time.Second)
		}
		seen[e.NotBefore] = true
	}
	if len(seen) < 8 {
		t.Fatalf("32 refusals came back at %d times, want them spread over at least 8 of the 16 slots", len(seen))
	}
}

// Each recovery seeds its ramp from the breaker's random source, so that replicas
// seeing the same calls do not admit and refuse the same ones: two breakers whose
// random draws differ ramp the same calls differently.
func TestRampDecisionsFollowTheRandomDraw(t *testing.T) {
	decisions := func(r float64) (got []bool) {
		h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute, RampFloor: 0.5},
			breaker.WithRandom(func() float64 { return r }))
		h.recover(1)
		for range 16 {
			p, err := h.b.Acquire(t.Context())
			if err == nil {
				p.Complete(breaker.Success)
			}
			got = append(got, err == nil)
		}
		return got
	}
	a, b := decisions(0.25), decisions(0.75)
	if slices.Equal(a, b) {
		t.Fatalf("draws 0.25 and 0.75 admitted the same calls %v: the ramp ignores its seed", a)
	}
}

// A policy without a ramp makes no Ramp.
func TestNoRampWithoutRampDuration(t *testing.T) {
	if r := backend.NewRamp("x", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}, t0, 1); r != nil {
		t.Fatal("NewRamp of a policy without RampDuration is not nil")
	}
	if r := backend.NewRamp("x", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Second}, t0, 1); r == nil {
		t.Fatal("NewRamp of a policy with RampDuration is nil")
	}
}
