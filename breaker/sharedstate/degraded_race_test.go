package sharedstate_test

// probeLocally's and openRefused's own guards: a local opening or probe that happens
// while this replica's lease or OPEN write is out (another caller's call completes or
// starts meanwhile) must still hold when the store refuses the write. A driver hook
// runs that other call inside the write, so the interleaving is deterministic
// (issue 33).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// esDuringWrite runs during once inside the next Replace, then refuses that write.
type esDuringWrite struct {
	*counting
	during func()
}

func (w *esDuringWrite) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	if f := w.during; f != nil {
		w.during = nil
		f()
		return errOOM
	}
	return w.counting.Replace(ctx, id, expect, next)
}

// msRefused is the state both tests below start from: c (KeepLocal, RetryDelay a
// minute) over w, whose store has refused writes since start; two failures kept here;
// the shared record opened by another replica until start+10s and over by the clock's
// time (start+20s); and local, a call admitted on local evidence.
type msRefused struct {
	clock *fakeclock.Clock
	w     *esDuringWrite
	c     *sharedstate.Circuit
	start time.Time
	local breaker.Permit
}

func msLocalPermitOverRefusedWrites(t *testing.T, seen *transitions) msRefused {
	t.Helper()
	s := msRefused{clock: fakeclock.New(rulesT0), w: &esDuringWrite{counting: newCounting()}}
	s.c = esLocalCircuit(t, s.w, s.clock, seen, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	if err := s.c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.start = s.clock.Now()
	s.w.RefuseWrites(errOOM)
	outcome(t, s.c, breaker.Failure)
	outcome(t, s.c, breaker.Failure) // 2 of 3 kept here
	esEdit(t, s.w.MemoryDriver, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil = breaker.Open, r.Generation+1, s.start.Add(10*time.Second).UnixNano()
	})
	s.clock.Advance(20 * time.Second) // the shared break is over; RetryDelay is not
	s.local = esAcquire(t, s.c)       // admitted on local evidence
	if s.local.Probe() {
		t.Fatal("the call admitted on local evidence is a probe")
	}
	return s
}

// msRejectedUntil fails t unless err, the answer of an Acquire that returned p, is an
// *OpenError whose NotBefore is until; a permit handed out instead is completed.
func msRejectedUntil(t *testing.T, p breaker.Permit, err error, until time.Time, what string) {
	t.Helper()
	var oe *breaker.OpenError
	if errors.As(err, &oe) && oe.NotBefore.Equal(until) {
		return
	}
	if err == nil {
		p.Complete(breaker.Neutral)
	}
	t.Fatalf("%s: Acquire = %v; want a rejection until %v", what, err, until)
}

func TestLocalOpeningDuringARefusedLeaseWriteHolds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		advance time.Duration // the clock moves on by this inside the write
		probe   bool          // the call gets a local probe (else a rejection)
		inside  bool          // another call takes the local probe inside the write
	}{
		{"the local break running", 0, false, false},
		{"the local break ending as the write returns", time.Minute, true, false},
		{"the local probe taken while the write is out", time.Minute, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := msLocalPermitOverRefusedWrites(t, &transitions{})
			s.clock.Set(s.start.Add(time.Minute)) // RetryDelay ends: the next call tries the lease
			var until time.Time
			var inner breaker.Permit
			s.w.during = func() {
				s.local.Complete(breaker.Failure) // the third failure: open here
				until = s.clock.Now().Add(time.Minute)
				s.clock.Advance(tc.advance)
				if tc.inside {
					inner = esAcquire(t, s.c)
					if !inner.Probe() {
						t.Error("the call as the local break ended is no probe")
					}
					until = s.clock.Now().Add(5 * time.Second) // HalfOpenRetryDelay
				}
			}
			p, err := s.c.Acquire(context.Background())
			if tc.inside {
				defer inner.Complete(breaker.Neutral)
			}
			if tc.probe {
				if err != nil || !p.Probe() {
					t.Fatalf("Acquire as the local break ends: probe %v, %v; want a local probe", p.Probe(), err)
				}
				p.Complete(breaker.Neutral)
				return
			}
			msRejectedUntil(t, p, err, until, "Acquire whose lease write saw a local opening")
		})
	}
}

// The same for the OPEN this replica writes over a tripped record: a local opening
// made while that write is out is the one that stands (one transition, its deadline).
func TestLocalOpeningDuringARefusedOpenWriteIsNotRepeated(t *testing.T) {
	seen := &transitions{}
	s := msLocalPermitOverRefusedWrites(t, seen)
	esEdit(t, s.w.MemoryDriver, func(r *sharedstate.Record) { // closed again, and tripped by the fleet
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Closed, r.Generation+1, 0, 3
		r.Reason, r.Since = breaker.ReasonProbeSucceeded, s.clock.Now().UnixNano()
	})
	s.clock.Set(s.start.Add(time.Minute)) // RetryDelay ends: the next call writes OPEN
	var until time.Time
	s.w.during = func() {
		s.local.Complete(breaker.Failure) // the third failure: open here
		until = s.clock.Now().Add(time.Minute)
		s.clock.Advance(time.Second)
	}
	p, err := s.c.Acquire(context.Background())
	msRejectedUntil(t, p, err, until, "Acquire whose OPEN write saw a local opening")
	n := 0
	for _, tr := range seen.seen {
		if tr.Reason == sharedstate.ReasonLocalThreshold {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d local openings reported; want 1", n)
	}
}

// And when, while that OPEN is out, the record's break ends and another call takes a
// local probe (its lease refused too), the call whose OPEN the store refused is turned
// away for HalfOpenRetryDelay, as during any local probe.
func TestLocalProbeDuringARefusedOpenWriteTurnsTheCallAway(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	w := &esDuringWrite{counting: newCounting()}
	c := esLocalCircuit(t, w, clock, &transitions{}, nil)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	esEdit(t, w.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 }) // the fleet tripped
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	w.RefuseWrites(errOOM)
	var probe breaker.Permit
	w.during = func() {
		esEdit(t, w.MemoryDriver, func(r *sharedstate.Record) { // another replica opened it; its break is over
			r.State, r.Generation, r.Failures = breaker.Open, r.Generation+1, 0
			r.OpenUntil, r.Reason, r.Since = clock.Now().Add(-time.Second).UnixNano(), breaker.ReasonFailureThreshold, clock.Now().Add(-time.Minute).UnixNano()
		})
		if err := c.Refresh(ctx); err != nil {
			t.Error(err)
		}
		probe = esAcquire(t, c) // its lease refused: a local probe
		if !probe.Probe() {
			t.Error("the call after the break is no probe")
		}
	}
	p, err := c.Acquire(ctx)
	if probe != (breaker.Permit{}) {
		defer probe.Complete(breaker.Neutral)
	}
	msRejectedUntil(t, p, err, clock.Now().Add(5*time.Second), "Acquire whose OPEN was refused during a local probe")
}

// Two callers whose first refusals race (the second one's runs while the first is
// between finding no degraded state and creating one, through a test hook) share one
// degraded state: both failures count here.
func TestFirstRefusalsAtOnceShareTheDegradedState(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, nil)
	first, second := esAcquire(t, c), esAcquire(t, c)
	d.RefuseWrites(errOOM)
	var secondKept bool
	unset := sharedstate.MsSetTestHookRefused(nil)
	defer unset()
	sharedstate.MsSetTestHookRefused(func() {
		sharedstate.MsSetTestHookRefused(nil)
		secondKept = second.Complete(breaker.Failure)
	})
	if firstKept := first.Complete(breaker.Failure); !firstKept || !secondKept {
		t.Fatalf("failures refused at once: kept %v and %v; want both kept here", firstKept, secondKept)
	}
	if s := c.Snapshot(); s.Failures != 2 || s.DegradedSince.IsZero() {
		t.Fatalf("snapshot %+v; want 2 failures kept here, degraded", s)
	}
}
