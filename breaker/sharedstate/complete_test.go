package sharedstate_test

// What a completed permit writes (complete.go): slow successes, lost writes on the
// counter and replace paths, resets (sent once per version, sent again when lost,
// refused by the store), a reset that finds the count already reset or at the
// threshold, outcomes under an override, and probe outcomes at their edges.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// A closed call's success that took longer than SlowCallDuration counts as a failure;
// one that took exactly SlowCallDuration is a success.
func TestSlowClosedSuccessCountsAsAFailure(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c := ruleCircuit(t, newCounting(), clock, func(cfg *sharedstate.Config) {
		cfg.Policy.SlowCallDuration = time.Second
		cfg.MaxStaleness = time.Hour
	})
	p := mustAcquire(t, c)
	clock.Advance(time.Second)
	p.Complete(breaker.Success)
	if s := c.Snapshot(); s.Failures != 0 {
		t.Fatalf("a success of exactly SlowCallDuration: %d failures; want 0", s.Failures)
	}
	p = mustAcquire(t, c)
	clock.Advance(time.Second + time.Nanosecond)
	if !p.Complete(breaker.Success) {
		t.Fatal("a slow success did not count")
	}
	if s := c.Snapshot(); s.Failures != 1 {
		t.Fatalf("a success slower than SlowCallDuration: %d failures; want 1", s.Failures)
	}
}

// A probe's success that took longer than SlowCallDuration fails the probe; one of
// exactly SlowCallDuration closes the circuit.
func TestSlowProbeSuccessFailsTheProbe(t *testing.T) {
	for _, tc := range []struct {
		took time.Duration
		want breaker.State
	}{{time.Second, breaker.Closed}, {time.Second + time.Nanosecond, breaker.Open}} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
			cfg.Policy.SlowCallDuration = time.Second
			cfg.Policy.ProbeLease = 10 * time.Second
		})
		p := openThenProbe(t, c, clock)
		clock.Advance(tc.took)
		if !p.Complete(breaker.Success) {
			t.Fatalf("a probe success after %v did not count", tc.took)
		}
		if r, _ := d.Load(context.Background(), "kafka:orders"); r.State != tc.want {
			t.Fatalf("a probe success after %v (SlowCallDuration 1s) left %+v; want %v", tc.took, r, tc.want)
		}
	}
}

// Over a replace-only store, a success that finds the count already reset by another
// replica writes nothing more and counts; one that finds the count at the threshold
// writes OPEN.
func TestReplacePathResetFindsTheCountMoved(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int64
		want     breaker.State
	}{{"already reset", 0, breaker.Closed}, {"at the threshold", 3, breaker.Open}} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			h := newFlakyDriver()
			c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
			outcome(t, c, breaker.Failure)
			editRecord(t, h.m, func(r *sharedstate.Record) { r.Failures = tc.failures })
			before := h.stored(t)
			if !outcome(t, c, breaker.Success) {
				t.Fatal("the success did not count")
			}
			r := h.stored(t)
			if r.State != tc.want {
				t.Fatalf("stored %+v; want %v", r, tc.want)
			}
			if tc.want == breaker.Closed && r.Version != before.Version {
				t.Fatalf("the success wrote over a count another replica had reset: version %d, was %d", r.Version, before.Version)
			}
			if tc.want == breaker.Open && r.Reason != breaker.ReasonFailureThreshold {
				t.Fatalf("opened for %q; want %q", r.Reason, breaker.ReasonFailureThreshold)
			}
		})
	}
}

// Over a Counter, a reset that conflicts because the count is at the threshold writes
// OPEN; one that conflicts because another replica reset it counts; one whose
// follow-up read fails does not count.
func TestCounterResetConflicts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failures  int64
		loadErr   error
		want      breaker.State
		wantTaken string // "" when either answer is right
	}{
		{"at the threshold", 3, nil, breaker.Open, ""},
		{"already reset", 0, nil, breaker.Closed, "true"},
		{"read fails", 0, errDown, breaker.Closed, "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			h := &flakyCounter{flakyDriver: newFlakyDriver()}
			c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
			outcome(t, c, breaker.Failure)
			editRecord(t, h.m, func(r *sharedstate.Record) { r.Failures = tc.failures })
			h.failLoads(tc.loadErr)
			if got := outcome(t, c, breaker.Success); tc.wantTaken != "" && strconv.FormatBool(got) != tc.wantTaken {
				t.Fatalf("Complete = %v; want %s", got, tc.wantTaken)
			}
			if r := h.stored(t); r.State != tc.want {
				t.Fatalf("stored %+v; want %v", r, tc.want)
			}
		})
	}
}

// Over a Counter, a failure whose add conflicts and whose follow-up read fails is a
// refusal: under KeepLocal it counts here, and the replica reports itself degraded.
func TestCounterAddConflictThenFailedReadKeepsTheFailureHere(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := &flakyCounter{flakyDriver: newFlakyDriver()}
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.addConflict = true
	h.failLoads(errDown)
	if !outcome(t, c, breaker.Failure) {
		t.Fatal("the failure was dropped; want it kept here")
	}
	if s := c.Snapshot(); s.Failures != 1 || s.DegradedSince.IsZero() {
		t.Fatalf("after the failure: %+v; want 1 failure kept here, degraded", s)
	}
}

// An outcome of a generation that ended (another replica moved the record on) changes
// nothing and writes nothing: a closed call's failure over a replace-only store, and a
// probe's success after another replica reopened the circuit.
func TestOutcomeOfAnEndedGenerationWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		permit  func(t *testing.T, c *sharedstate.Circuit, clock *fakeclock.Clock) breaker.Permit
		move    func(r *sharedstate.Record, now time.Time)
		outcome breaker.Outcome
		edit    func(*sharedstate.Config)
	}{
		{"failure of a closed generation", func(t *testing.T, c *sharedstate.Circuit, _ *fakeclock.Clock) breaker.Permit {
			return mustAcquire(t, c)
		},
			func(r *sharedstate.Record, now time.Time) {
				r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Open, r.Generation+1, now.Add(time.Minute).UnixNano(), 3
			}, breaker.Failure, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour }},
		{"success of a probe", openThenProbe,
			func(r *sharedstate.Record, now time.Time) {
				r.State, r.Generation, r.Leases = breaker.Open, r.Generation+1, nil
				r.OpenUntil, r.FailedProbes = now.Add(2*time.Minute).UnixNano(), 1
			}, breaker.Success, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			h := newFlakyDriver()
			c := ruleCircuit(t, h, clock, tc.edit)
			p := tc.permit(t, c, clock)
			moved := editRecord(t, h.m, func(r *sharedstate.Record) { tc.move(r, clock.Now()) })
			if p.Complete(tc.outcome) {
				t.Fatalf("%v of a generation another replica ended counted", tc.outcome)
			}
			if r := h.stored(t); r.Version != moved.Version {
				t.Fatalf("stored version %d; want %d (nothing written)", r.Version, moved.Version)
			}
		})
	}
}

// Over a replace-only store, a failure whose write conflicts and whose read then fails
// is reported to OnError and does not count; the store is left alone for RetryDelay.
func TestReplacePathFailedReadAfterAConflict(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := newFlakyDriver()
	var reported []error
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) {
		cfg.MaxStaleness = time.Hour
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	p := mustAcquire(t, c)
	editRecord(t, h.m, func(*sharedstate.Record) {})
	h.failLoads(errDown)
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure that could not be written counted")
	}
	if len(reported) != 1 || !errors.Is(reported[0], errDown) || !errors.Is(reported[0], breaker.ErrUnavailable) {
		t.Fatalf("OnError got %v; want the failed read, as ErrUnavailable", reported)
	}
	_, writes := h.counts()
	p = mustAcquire(t, c)
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure within RetryDelay of a failed read counted")
	}
	if _, now := h.counts(); now != writes {
		t.Fatalf("%d writes within RetryDelay of a failed read; want none", now-writes)
	}
}

// Over a replace-only store whose writes keep conflicting, a failure gives up after a
// bounded number of attempts and does not count.
func TestReplacePathGivesUpOnContention(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := newFlakyDriver()
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	p := mustAcquire(t, c)
	h.mu.Lock()
	h.conflict = true
	h.mu.Unlock()
	_, before := h.counts()
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure that was never written counted")
	}
	if _, after := h.counts(); after-before < 2 || after-before > 100 {
		t.Fatalf("%d writes tried; want a few retries, bounded", after-before)
	}
}

// A probe's outcome while the store is being waited out (RetryDelay after a failed
// read) changes nothing and sends nothing.
func TestProbeOutcomeDuringRetryDelayIsDropped(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := newFlakyDriver()
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	p := openThenProbe(t, c, clock)
	h.failLoads(errDown)
	clock.Advance(2 * time.Second)
	if err := c.Refresh(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("Refresh with the store down: %v", err)
	}
	h.failLoads(nil)
	loads, writes := h.counts()
	if p.Complete(breaker.Success) {
		t.Fatal("a probe outcome within RetryDelay of a failed read counted")
	}
	if l, w := h.counts(); l != loads || w != writes {
		t.Fatalf("%d reads and %d writes for it; want none", l-loads, w-writes)
	}
}

// A probe completed after this replica moved the circuit on (here, a ForceOpen)
// changes nothing, without a read.
func TestProbeOutcomeAfterTheCircuitMovedOnIsDropped(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := newFlakyDriver()
	c := ruleCircuit(t, h, clock, nil)
	p := openThenProbe(t, c, clock)
	if err := c.ForceOpen(context.Background(), clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	loads, _ := h.counts()
	if p.Complete(breaker.Success) {
		t.Fatal("a probe of an earlier generation counted")
	}
	if l, _ := h.counts(); l != loads {
		t.Fatal("a probe of an earlier generation read the store")
	}
	if r := h.stored(t); r.State != breaker.Open || r.Override != breaker.ForcedOpen {
		t.Fatalf("stored %+v; want the ForceOpen kept", r)
	}
}

// A probe completed when this replica has no snapshot of its generation (Forget) reads
// the record and applies the outcome; when that read fails the outcome is reported
// and dropped.
func TestProbeOutcomeWithoutASnapshotReadsTheRecord(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := newFlakyDriver()
	var reported []error
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) {
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	p := openThenProbe(t, c, clock)
	c.Forget()
	if !p.Complete(breaker.Success) {
		t.Fatal("a probe's success after Forget did not count")
	}
	if r := h.stored(t); r.State != breaker.Closed || r.Reason != breaker.ReasonProbeSucceeded {
		t.Fatalf("stored %+v; want closed by the probe", r)
	}

	clock2 := fakeclock.New(rulesT0)
	h2 := newFlakyDriver()
	c2 := ruleCircuit(t, h2, clock2, func(cfg *sharedstate.Config) {
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	p = openThenProbe(t, c2, clock2)
	c2.Forget()
	h2.failLoads(errDown)
	reported = nil
	if p.Complete(breaker.Success) {
		t.Fatal("a probe's success that could not be read for counted")
	}
	if len(reported) != 1 || !errors.Is(reported[0], errDown) {
		t.Fatalf("OnError got %v; want the failed read", reported)
	}
	if r := h2.stored(t); r.State != breaker.HalfOpen {
		t.Fatalf("stored %+v; want still half-open", r)
	}
}

// Over a Counter, a success whose reset conflicts because another replica has opened
// the circuit leaves that opening as it is: no second OPEN, no new deadline.
func TestCounterResetAfterAnotherReplicaOpenedWritesNothing(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := &flakyCounter{flakyDriver: newFlakyDriver()}
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	outcome(t, c, breaker.Failure)
	opened := editRecord(t, h.m, func(r *sharedstate.Record) {
		r.State, r.Generation, r.Failures = breaker.Open, r.Generation+1, 3
		r.OpenUntil, r.Reason, r.Since = clock.Now().Add(time.Minute).UnixNano(), breaker.ReasonFailureThreshold, clock.Now().UnixNano()
	})
	clock.Advance(time.Second)
	outcome(t, c, breaker.Success)
	if r := h.stored(t); r.Version != opened.Version || r.OpenUntil != opened.OpenUntil {
		t.Fatalf("stored %+v; want the other replica's opening untouched (version %d)", r, opened.Version)
	}
}

// Successes on a snapshot without failures send nothing; a success on a snapshot whose
// count reached the threshold sends no reset either (no success may wipe out a reached
// threshold).
func TestSuccessesSendNothingOnACleanOrTrippedSnapshot(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	requests := func() int { return d.count("load") + d.count("replace") + d.count("add") + d.count("reset") }
	before := requests()
	for range 5 {
		outcome(t, c, breaker.Success)
	}
	if n := requests() - before; n != 0 {
		t.Fatalf("5 successes on a clean snapshot sent %d requests; want 0", n)
	}
	p := mustAcquire(t, c)
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 }) // tripped, OPEN not yet written
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	resets := d.count("reset")
	p.Complete(breaker.Success)
	if d.count("reset") != resets {
		t.Fatal("a success on a tripped snapshot sent a reset")
	}
}

// A failure of a closed generation that ended in a new closed one (here another
// replica's probe closed the circuit again) does not count in the new generation, over
// either kind of driver.
func TestFailureOfAnEndedClosedGenerationDoesNotCount(t *testing.T) {
	for _, counter := range []bool{false, true} {
		clock := fakeclock.New(rulesT0)
		h := newFlakyDriver()
		var d sharedstate.Driver = h
		if counter {
			d = &flakyCounter{flakyDriver: h}
		}
		c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
		p := mustAcquire(t, c)
		moved := editRecord(t, h.m, func(r *sharedstate.Record) {
			r.Generation, r.Reason, r.Since = r.Generation+2, breaker.ReasonProbeSucceeded, clock.Now().UnixNano()
		})
		if p.Complete(breaker.Failure) {
			t.Fatalf("counter %v: a failure of an ended generation counted", counter)
		}
		if r := h.stored(t); r.Version != moved.Version || r.Failures != 0 {
			t.Fatalf("counter %v: stored %+v; want the new generation untouched", counter, r)
		}
	}
}

// A Success whose reset could not be written leaves the failures standing; the next
// Success must send the reset again, or failures that were not consecutive open the
// circuit.
func TestFailedResetIsSentAgain(t *testing.T) {
	for name, wrap := range map[string]func(*circuittest.MemoryDriver) sharedstate.Driver{
		"Counter":     func(m *circuittest.MemoryDriver) sharedstate.Driver { return m },
		"ReplaceOnly": func(m *circuittest.MemoryDriver) sharedstate.Driver { return replaceOnly{m} },
	} {
		t.Run(name, func(t *testing.T) {
			store := &circuittest.MemoryDriver{}
			c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Scope: breaker.SharedDependency,
				Policy: breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 3, BreakDuration: time.Minute},
				Driver: wrap(store), RetryDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			call := func(o breaker.Outcome) bool {
				t.Helper()
				p, err := c.Acquire(context.Background())
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				return p.Complete(o)
			}
			call(breaker.Failure)
			call(breaker.Failure)
			store.Down(errDown)
			p, err := c.Acquire(context.Background()) // on the snapshot
			if err != nil {
				t.Fatal(err)
			}
			if p.Complete(breaker.Success) {
				t.Fatal("a reset that could not be written counted")
			}
			store.Down(nil)
			call(breaker.Success)
			call(breaker.Failure)
			if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 1 {
				t.Fatalf("after F F S(lost) S F: %v with %d failures; want closed with 1", s.State, s.Failures)
			}
		})
	}
}

// A reset the store refuses is handled like any refused write (complete.go:
// resetFailures, degraded.go: writeFailed): OnError is told, and under KeepLocal the
// replica keeps its evidence locally (degraded), under FailClosed it refuses calls for
// RetryDelay.

// resetRefusingDriver is a Counter driver whose ResetFailures the store refuses.
type resetRefusingDriver struct {
	*circuittest.MemoryDriver
}

func (resetRefusingDriver) ResetFailures(context.Context, string, sharedstate.Closed) (sharedstate.Record, error) {
	return sharedstate.Record{}, errOOM
}

// After a failure counted in the store, the Success whose reset the store refuses is
// not taken into account, OnError is told the refusal, and the replica is degraded
// (KeepLocal) or refuses the next call (FailClosed).
func TestRefusedResetIsReportedAndKept(t *testing.T) {
	for _, mode := range []sharedstate.StoreFailure{sharedstate.KeepLocal, sharedstate.FailClosed} {
		t.Run(map[sharedstate.StoreFailure]string{sharedstate.KeepLocal: "KeepLocal", sharedstate.FailClosed: "FailClosed"}[mode], func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			var mu sync.Mutex
			var reported []error
			c := ruleCircuit(t, resetRefusingDriver{&circuittest.MemoryDriver{}}, clock, func(cfg *sharedstate.Config) {
				cfg.OnStoreFailure = mode
				cfg.OnError = func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }
			})
			outcome(t, c, breaker.Failure) // counted in the store
			if outcome(t, c, breaker.Success) {
				t.Fatal("a Success whose reset the store refused was taken into account")
			}
			mu.Lock()
			n := len(reported)
			told := n > 0 && errors.Is(reported[n-1], errOOM)
			mu.Unlock()
			if !told {
				t.Fatalf("OnError after a refused reset: %d errors, the last not the refusal; want it told", n)
			}
			switch mode {
			case sharedstate.KeepLocal:
				if s := c.Snapshot(); s.DegradedSince.IsZero() {
					t.Fatalf("Snapshot after a refused reset under KeepLocal: %+v; want degraded", s)
				}
			case sharedstate.FailClosed:
				if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrUnavailable) {
					t.Fatalf("Acquire within RetryDelay of a refused reset under FailClosed: %v; want ErrUnavailable", err)
				}
			}
		})
	}
}

// Probe outcomes at their edges: the break doubling per failed probe and its reset
// by a success, a lease that ends exactly as the probe completes, and the cost of a
// probe's outcome in requests.

// A failed probe doubles the break and is counted in FailedProbes; the probe that
// closes the circuit clears them, so that the next outage starts from the policy's
// break again.
func TestFailedProbesDoubleTheBreakUntilAProbeSucceeds(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.MaxBreakDuration = time.Hour })
	openThenProbe(t, c, clock).Complete(breaker.Failure)
	until := clock.Now().Add(2 * time.Minute)
	if s := c.Snapshot(); s.State != breaker.Open || !s.NotBefore.Equal(until) || s.FailedProbes != 1 {
		t.Fatalf("after a failed probe: %+v; want open until %v with 1 failed probe", s, until)
	}
	clock.Set(until)
	p := mustAcquire(t, c)
	if !p.Probe() || !p.Complete(breaker.Success) {
		t.Fatal("the second probe was not admitted or its success not counted")
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.FailedProbes != 0 {
		t.Fatalf("after a successful probe: %+v; want closed with no failed probes", s)
	}
	if r, _ := d.Load(context.Background(), "kafka:orders"); r.FailedProbes != 0 {
		t.Fatalf("stored %d failed probes after the close; want 0", r.FailedProbes)
	}
	openThenProbe(t, c, clock).Complete(breaker.Failure) // a new outage: the first failed probe again
	if s := c.Snapshot(); !s.NotBefore.Equal(clock.Now().Add(2 * time.Minute)) {
		t.Fatalf("the first failed probe of a new outage breaks until %v; want 2 minutes", s.NotBefore)
	}
}

// A probe that completes exactly when its lease ends no longer counts: another
// replica may have taken the slot over.
func TestProbeAtItsLeaseEndDoesNotCount(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.ProbeLease = 10 * time.Second })
	p := openThenProbe(t, c, clock)
	clock.Advance(10*time.Second - time.Nanosecond)
	if _, err := c.Acquire(context.Background()); err == nil {
		t.Fatal("a second probe admitted while the first lease holds")
	}
	clock.Advance(time.Nanosecond)
	if p.Complete(breaker.Success) {
		t.Fatal("a probe completed at its lease's end counted")
	}
	if r, _ := d.Load(context.Background(), "kafka:orders"); r.State != breaker.HalfOpen {
		t.Fatalf("stored %+v; want still half-open", r)
	}
}

// A probe's outcome on a fresh snapshot of its generation costs one write and no read.
func TestProbeOutcomeOnAFreshSnapshotReadsNothing(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	p := openThenProbe(t, c, clock)
	loads, writes := d.count("load"), d.count("replace")
	if !p.Complete(breaker.Success) {
		t.Fatal("the probe's success did not count")
	}
	if l, w := d.count("load")-loads, d.count("replace")-writes; l != 0 || w != 1 {
		t.Fatalf("the probe's outcome cost %d reads and %d writes; want 0 and 1", l, w)
	}
}

// A probe that fails after another succeeded opens a clean record: no success count
// and no lease of the half-open state carried into the break (Record.Check refuses
// leases on an open record).
func TestFailedProbeOpensACleanRecord(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) {
		cfg.Policy.HalfOpenMaxProbes, cfg.Policy.SuccessesToClose = 2, 2
	})
	first := openThenProbe(t, c, clock)
	second := mustAcquire(t, c)
	if !second.Probe() {
		t.Fatal("the second call after the break is no probe")
	}
	first.Complete(breaker.Success) // one of two successes
	second.Complete(breaker.Failure)
	r, err := d.Load(context.Background(), "kafka:orders")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != breaker.Open || r.Successes != 0 || len(r.Leases) != 0 || r.Check("kafka:orders") != nil {
		t.Fatalf("record after the failed probe: %+v (check: %v); want open, no successes, no leases", r, r.Check("kafka:orders"))
	}
}

// Over a driver without a Counter, the failure that reaches the threshold opens the
// circuit in the same write, and not one failure before it.
func TestReplacePathOpensAtTheThreshold(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, replaceOnly{d.MemoryDriver}, clock, nil)
	outcome(t, c, breaker.Failure)
	outcome(t, c, breaker.Failure)
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 2 {
		t.Fatalf("after 2 of 3 failures: %+v; want closed with 2", s)
	}
	outcome(t, c, breaker.Failure)
	r, _ := d.Load(context.Background(), "kafka:orders")
	if r.State != breaker.Open {
		t.Fatalf("stored after the third failure: %+v; want open", r)
	}
}

// A burst of successes after a failure sends one reset, not one each.
func TestResetIsSentOncePerVersion(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	outcome(t, c, breaker.Failure)
	permits := make([]breaker.Permit, 10)
	for i := range permits {
		p, err := c.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		permits[i] = p
	}
	// The first reset is held in flight while the other nine successes complete: they
	// must count on it rather than send their own.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d.onReset = func() {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
	}
	var counted atomic.Int32
	done := make(chan struct{})
	go func() {
		if permits[0].Complete(breaker.Success) {
			counted.Add(1)
		}
		close(done)
	}()
	<-entered
	for _, p := range permits[1:] {
		if p.Complete(breaker.Success) {
			counted.Add(1)
		}
	}
	close(release)
	<-done
	if got := d.count("reset"); got != 1 {
		t.Fatalf("%d resets for a burst of 10 successes; want 1", got)
	}
	if counted.Load() != 10 {
		t.Fatalf("%d of 10 successes counted; want all", counted.Load())
	}
}

// Under an override, outcomes change nothing: a ForceClose does not count failures,
// and writes nothing for them.
func TestOutcomesUnderAnOverrideChangeNothing(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	if err := c.ForceClose(context.Background(), clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	writes := d.count("add") + d.count("replace")
	for range 5 {
		if outcome(t, c, breaker.Failure) {
			t.Fatal("a failure under ForceClose counted")
		}
	}
	if got := d.count("add") + d.count("replace") - writes; got != 0 {
		t.Fatalf("%d writes for failures under ForceClose; want 0", got)
	}
	if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("after 5 failures under ForceClose: %+v; want closed with none", s)
	}
	if _, err := c.Acquire(context.Background()); errors.Is(err, breaker.ErrOpen) {
		t.Fatal("ForceClose did not hold")
	}
}
