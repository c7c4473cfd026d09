package sharedstate_test

// The KeepLocal rules while the store refuses writes: the evidence it refused counts in
// this replica, which opens, probes and recovers for itself (issue 33: these were
// proven only by the drivers' outage tests).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// esLocalCircuit is a KeepLocal circuit (threshold 3, break a minute doubling to at
// most 8, RetryDelay a second) that reports its transitions to seen.
func esLocalCircuit(t *testing.T, d sharedstate.Driver, clock *fakeclock.Clock, seen *transitions, edit func(*sharedstate.Config)) *sharedstate.Circuit {
	t.Helper()
	return ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.MaxBreakDuration = 8 * time.Minute
		cfg.Policy.HalfOpenRetryDelay = 5 * time.Second
		cfg.Observers = []func(breaker.Transition){seen.observe}
		if edit != nil {
			edit(cfg)
		}
	})
}

// esOpenUntil returns the NotBefore of an open rejection, failing the test for any
// other answer.
func esOpenUntil(t *testing.T, c *sharedstate.Circuit, what string) time.Time {
	t.Helper()
	p, err := c.Acquire(context.Background())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) {
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		t.Fatalf("%s: Acquire = %v; want an *OpenError", what, err)
	}
	return oe.NotBefore
}

// esWantTransition fails unless the last transition seen is from → to for reason.
func esWantTransition(t *testing.T, seen *transitions, n int, from, to breaker.State, reason string) {
	t.Helper()
	seen.mu.Lock()
	got := len(seen.seen)
	seen.mu.Unlock()
	last := seen.last()
	if got != n || last.From != from || last.To != to || last.Reason != reason || last.Identity != "kafka:orders" {
		t.Fatalf("transition %d: %+v (of %d); want %v -> %v for %s", n, last, got, from, to, reason)
	}
}

// Failures the store refuses count here: at the threshold the replica opens locally
// for the break, then admits one local probe at a time; a failed probe opens it again
// for a doubled break, a successful one closes it, and once RetryDelay has passed
// without a refusal the replica trusts the store again.
func TestKeepLocalOpensProbesAndRecoversHere(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	seen := &transitions{}
	c := esLocalCircuit(t, d, clock, seen, nil)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	gen := c.Snapshot().Generation
	d.RefuseWrites(errOOM)
	refusedAt := clock.Now()
	for i := 1; i <= 2; i++ {
		if !outcome(t, c, breaker.Failure) {
			t.Fatalf("failure %d the store refused did not count here", i)
		}
		if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != i || !s.DegradedSince.Equal(refusedAt) {
			t.Fatalf("after %d refused failures: %+v; want closed, %d failures, degraded since %v", i, s, i, refusedAt)
		}
		clock.Advance(100 * time.Millisecond)
	}
	if !outcome(t, c, breaker.Failure) {
		t.Fatal("the third refused failure did not count")
	}
	esWantTransition(t, seen, 1, breaker.Closed, breaker.Open, sharedstate.ReasonLocalThreshold)
	if seen.last().Generation != gen {
		t.Fatalf("local opening reported with generation %d; want the shared one, %d", seen.last().Generation, gen)
	}
	until := clock.Now().Add(time.Minute)
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) || s.Failures != 3 {
		t.Fatalf("after the threshold: %+v; want open until %v with 3 failures", s, until)
	}
	if r, _ := d.Load(ctx, "kafka:orders"); r.State != breaker.Closed || r.Failures != 0 {
		t.Fatalf("stored %+v; want the record untouched (the store refuses)", r)
	}
	loads := d.count("load")
	if got := esOpenUntil(t, c, "open here"); !got.Equal(until) {
		t.Fatalf("rejected until %v; want %v", got, until)
	}
	if d.count("load") != loads {
		t.Fatal("a call rejected by the local break read the store")
	}

	clock.Set(until.Add(-time.Nanosecond))
	esOpenUntil(t, c, "a nanosecond before the local break ends")
	clock.Set(until)
	probe, err := c.Acquire(ctx)
	if err != nil || !probe.Probe() {
		t.Fatalf("Acquire when the local break ended: probe %v, %v; want a local probe", probe.Probe(), err)
	}
	if s := c.Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 {
		t.Fatalf("with a local probe out: %+v; want half-open with 1 probe", s)
	}
	if got, want := esOpenUntil(t, c, "a second caller during the local probe"), clock.Now().Add(5*time.Second); !got.Equal(want) {
		t.Fatalf("second caller rejected until %v; want HalfOpenRetryDelay later, %v", got, want)
	}
	if !probe.Complete(breaker.Failure) {
		t.Fatal("a failed local probe did not count")
	}
	esWantTransition(t, seen, 2, breaker.HalfOpen, breaker.Open, sharedstate.ReasonLocalProbeFailed)
	until = clock.Now().Add(2 * time.Minute) // one failed probe doubles the break
	if got := esOpenUntil(t, c, "after a failed local probe"); !got.Equal(until) {
		t.Fatalf("after a failed local probe rejected until %v; want %v", got, until)
	}
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) {
		t.Fatalf("after a failed local probe: %+v; want open until %v", s, until)
	}

	clock.Set(until)
	probe, err = c.Acquire(ctx)
	if err != nil || !probe.Probe() {
		t.Fatalf("Acquire after the second local break: probe %v, %v; want a local probe", probe.Probe(), err)
	}
	if probe.Complete(breaker.Neutral) {
		t.Fatal("a neutral local probe counted")
	}
	if len(seen.seen) != 2 {
		t.Fatalf("a neutral local probe made a transition: %+v", seen.last())
	}
	probe, err = c.Acquire(ctx)
	if err != nil || !probe.Probe() {
		t.Fatalf("Acquire after a neutral local probe: probe %v, %v; want the next local probe", probe.Probe(), err)
	}
	if !probe.Complete(breaker.Success) {
		t.Fatal("a successful local probe did not count")
	}
	esWantTransition(t, seen, 3, breaker.HalfOpen, breaker.Closed, sharedstate.ReasonLocalRecovered)
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 0 || s.DegradedSince.IsZero() {
		t.Fatalf("after the local recovery: %+v; want closed, no failures, still degraded", s)
	}
	p, err := c.Acquire(ctx) // RetryDelay has passed: the spent evidence is dropped
	if err != nil || p.Probe() {
		t.Fatalf("Acquire after the local recovery: probe %v, %v; want an ordinary call", p.Probe(), err)
	}
	p.Complete(breaker.Neutral)
	if s := c.Snapshot(); !s.DegradedSince.IsZero() {
		t.Fatalf("after RetryDelay with the evidence spent: %+v; want no longer degraded", s)
	}

	// After a local recovery a new refused failure starts counting from zero.
	if !outcome(t, c, breaker.Failure) {
		t.Fatal("a refused failure after the recovery did not count")
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 1 {
		t.Fatalf("one refused failure after the recovery: %+v; want closed with 1", s)
	}
}

// A success the replica counts while degraded wipes the local failures, as a success
// does on the shared record; a neutral outcome leaves them.
func TestKeepLocalSuccessResetsTheLocalCount(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	seen := &transitions{}
	c := esLocalCircuit(t, d, clock, seen, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Hour; cfg.MaxStaleness = time.Hour })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Neutral)
	if s := c.Snapshot(); s.Failures != 2 {
		t.Fatalf("after 2 refused failures and a neutral outcome: %d failures; want 2", s.Failures)
	}
	if !outcome(t, c, breaker.Success) {
		t.Fatal("a success while degraded did not count")
	}
	if s := c.Snapshot(); s.Failures != 0 || s.DegradedSince.IsZero() {
		t.Fatalf("after a success: %+v; want no failures, still degraded", s)
	}
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure)
	if s := c.Snapshot(); s.State != breaker.Closed || len(seen.seen) != 0 {
		t.Fatalf("2 failures after a success opened the replica: %+v", s)
	}
	outcome(t, c, breaker.Failure)
	esWantTransition(t, seen, 1, breaker.Closed, breaker.Open, sharedstate.ReasonLocalThreshold)
}

// A write is tried again exactly when RetryDelay after the refusal ends, not a
// nanosecond before.
func TestKeepLocalRetriesTheStoreExactlyAfterRetryDelay(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) {
		cfg.MaxStaleness = time.Hour
		cfg.Policy.FailureThreshold = 10
	})
	permits := make([]breaker.Permit, 3)
	for i := range permits {
		permits[i] = esAcquire(t, c)
	}
	d.RefuseWrites(errOOM)
	refusedAt := clock.Now()
	permits[0].Complete(breaker.Failure)
	adds := d.count("add")
	clock.Set(refusedAt.Add(time.Second - time.Nanosecond))
	permits[1].Complete(breaker.Failure)
	if d.count("add") != adds {
		t.Fatal("a write tried a nanosecond before RetryDelay ended")
	}
	clock.Set(refusedAt.Add(time.Second))
	permits[2].Complete(breaker.Failure)
	if d.count("add") != adds+1 {
		t.Fatalf("%d writes when RetryDelay ended; want 1", d.count("add")-adds)
	}
	if s := c.Snapshot(); s.Failures != 3 {
		t.Fatalf("%d failures kept here; want all 3", s.Failures)
	}
}

// Each failed local probe doubles the local break: one minute, then two, then four.
func TestKeepLocalFailedProbesBackOff(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := esLocalCircuit(t, d, clock, &transitions{}, nil)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.RefuseWrites(errOOM)
	for range 3 {
		outcome(t, c, breaker.Failure)
	}
	for i, brk := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute} {
		until := esOpenUntil(t, c, "locally open")
		if want := clock.Now().Add(brk); !until.Equal(want) {
			t.Fatalf("local break %d ends %v; want %v (%v)", i+1, until, want, brk)
		}
		clock.Set(until)
		p := esAcquire(t, c)
		if !p.Probe() {
			t.Fatalf("no local probe after local break %d", i+1)
		}
		p.Complete(breaker.Failure)
	}
}

// Under KeepLocal a refused write is still reported to OnError, as ErrUnavailable
// caused by the refusal, though the call's outcome is kept here.
func TestKeepLocalReportsTheRefusal(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	var reported []error
	c := esLocalCircuit(t, d, clock, &transitions{}, func(cfg *sharedstate.Config) {
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	esRefusedFailure(t, c, d)
	if len(reported) != 1 || !errors.Is(reported[0], breaker.ErrUnavailable) || !errors.Is(reported[0], errOOM) {
		t.Fatalf("OnError got %v; want the refusal, as ErrUnavailable", reported)
	}
}
