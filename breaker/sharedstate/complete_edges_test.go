package sharedstate_test

// CompletePermit's edges that only other packages' tests reached, or none (issue 33):
// slow successes, lost writes on the counter and replace paths, a reset that finds
// the count already reset or at the threshold, and probe outcomes after the circuit
// moved on.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// esHooked is a replace-only driver over a MemoryDriver that counts requests and can
// fail loads or make every replace conflict.
type esHooked struct {
	m        *circuittest.MemoryDriver
	mu       sync.Mutex
	loads    int
	replaces int
	loadErr  error // returned by Load when set
	conflict bool  // every Replace returns ErrConflict
}

func esNewHooked() *esHooked { return &esHooked{m: &circuittest.MemoryDriver{}} }

func (h *esHooked) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	h.mu.Lock()
	h.loads++
	err := h.loadErr
	h.mu.Unlock()
	if err != nil {
		return sharedstate.Record{}, err
	}
	return h.m.Load(ctx, id)
}

func (h *esHooked) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	h.mu.Lock()
	h.replaces++
	conflict := h.conflict
	h.mu.Unlock()
	if conflict {
		return sharedstate.ErrConflict
	}
	return h.m.Replace(ctx, id, expect, next)
}

func (h *esHooked) failLoads(err error) {
	h.mu.Lock()
	h.loadErr = err
	h.mu.Unlock()
}

func (h *esHooked) counts() (loads, replaces int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.loads, h.replaces
}

// stored returns the record of the test circuit.
func (h *esHooked) stored(t *testing.T) sharedstate.Record {
	t.Helper()
	r, err := h.m.Load(context.Background(), "kafka:orders")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// esHookedCounter is esHooked with the MemoryDriver's Counter, whose AddFailure can be
// made to conflict.
type esHookedCounter struct {
	*esHooked
	addConflict bool
}

func (h *esHookedCounter) AddFailure(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	if h.addConflict {
		return sharedstate.Record{}, sharedstate.ErrConflict
	}
	return h.m.AddFailure(ctx, id, c)
}

func (h *esHookedCounter) ResetFailures(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return h.m.ResetFailures(ctx, id, c)
}

// esEdit stores the record of the test circuit after edit, one version on, as another
// replica's write would.
func esEdit(t *testing.T, m *circuittest.MemoryDriver, edit func(*sharedstate.Record)) sharedstate.Record {
	t.Helper()
	r, err := m.Load(context.Background(), "kafka:orders")
	if err != nil {
		t.Fatal(err)
	}
	edit(&r)
	r.Version++
	m.Set("kafka:orders", r)
	return r
}

func esAcquire(t *testing.T, c *sharedstate.Circuit) breaker.Permit {
	t.Helper()
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return p
}

// A closed call's success that took longer than SlowCallDuration counts as a failure;
// one that took exactly SlowCallDuration is a success.
func TestSlowClosedSuccessCountsAsAFailure(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c := ruleCircuit(t, newCounting(), clock, func(cfg *sharedstate.Config) {
		cfg.Policy.SlowCallDuration = time.Second
		cfg.MaxStaleness = time.Hour
	})
	p := esAcquire(t, c)
	clock.Advance(time.Second)
	p.Complete(breaker.Success)
	if s := c.Snapshot(); s.Failures != 0 {
		t.Fatalf("a success of exactly SlowCallDuration: %d failures; want 0", s.Failures)
	}
	p = esAcquire(t, c)
	clock.Advance(time.Second + time.Nanosecond)
	if !p.Complete(breaker.Success) {
		t.Fatal("a slow success did not count")
	}
	if s := c.Snapshot(); s.Failures != 1 {
		t.Fatalf("a success slower than SlowCallDuration: %d failures; want 1", s.Failures)
	}
}

// esProbe opens c with three failures, waits out the break and returns the probe
// admitted then.
func esProbe(t *testing.T, c *sharedstate.Circuit, clock *fakeclock.Clock) breaker.Permit {
	t.Helper()
	for range 3 {
		outcome(t, c, breaker.Failure)
	}
	if s := c.Snapshot(); s.State != breaker.Open {
		t.Fatalf("after 3 failures: %+v; want open", s)
	}
	clock.Advance(time.Minute)
	p := esAcquire(t, c)
	if !p.Probe() {
		t.Fatal("the call after the break is no probe")
	}
	return p
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
		p := esProbe(t, c, clock)
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
			h := esNewHooked()
			c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
			outcome(t, c, breaker.Failure)
			esEdit(t, h.m, func(r *sharedstate.Record) { r.Failures = tc.failures })
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
			h := &esHookedCounter{esHooked: esNewHooked()}
			c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
			outcome(t, c, breaker.Failure)
			esEdit(t, h.m, func(r *sharedstate.Record) { r.Failures = tc.failures })
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
	h := &esHookedCounter{esHooked: esNewHooked()}
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

// Over a replace-only store, a failure that finds the circuit moved to a new
// generation changes nothing and writes nothing.
func TestReplacePathFailureAfterTheGenerationMovedOn(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := esNewHooked()
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	p := esAcquire(t, c)
	moved := esEdit(t, h.m, func(r *sharedstate.Record) {
		r.State, r.Generation, r.OpenUntil, r.Failures = breaker.Open, r.Generation+1, clock.Now().Add(time.Minute).UnixNano(), 3
	})
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure of a generation that ended counted")
	}
	if r := h.stored(t); r.Version != moved.Version {
		t.Fatalf("stored version %d; want %d (nothing written)", r.Version, moved.Version)
	}
}

// Over a replace-only store, a failure whose write conflicts and whose read then fails
// is reported to OnError and does not count; the store is left alone for RetryDelay.
func TestReplacePathFailedReadAfterAConflict(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := esNewHooked()
	var reported []error
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) {
		cfg.MaxStaleness = time.Hour
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	p := esAcquire(t, c)
	esEdit(t, h.m, func(*sharedstate.Record) {})
	h.failLoads(errDown)
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure that could not be written counted")
	}
	if len(reported) != 1 || !errors.Is(reported[0], errDown) || !errors.Is(reported[0], breaker.ErrUnavailable) {
		t.Fatalf("OnError got %v; want the failed read, as ErrUnavailable", reported)
	}
	_, writes := h.counts()
	p = esAcquire(t, c)
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
	h := esNewHooked()
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	p := esAcquire(t, c)
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
	h := esNewHooked()
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.RetryDelay = time.Minute })
	p := esProbe(t, c, clock)
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
	h := esNewHooked()
	c := ruleCircuit(t, h, clock, nil)
	p := esProbe(t, c, clock)
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
	h := esNewHooked()
	var reported []error
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) {
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	p := esProbe(t, c, clock)
	c.Forget()
	if !p.Complete(breaker.Success) {
		t.Fatal("a probe's success after Forget did not count")
	}
	if r := h.stored(t); r.State != breaker.Closed || r.Reason != breaker.ReasonProbeSucceeded {
		t.Fatalf("stored %+v; want closed by the probe", r)
	}

	clock2 := fakeclock.New(rulesT0)
	h2 := esNewHooked()
	c2 := ruleCircuit(t, h2, clock2, func(cfg *sharedstate.Config) {
		cfg.OnError = func(err error) { reported = append(reported, err) }
	})
	p = esProbe(t, c2, clock2)
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

// A probe whose record another replica moved on (its probe failed: a new open
// generation) changes nothing and writes nothing.
func TestProbeOutcomeAfterAnotherReplicaMovedOn(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := esNewHooked()
	c := ruleCircuit(t, h, clock, nil)
	p := esProbe(t, c, clock)
	moved := esEdit(t, h.m, func(r *sharedstate.Record) {
		r.State, r.Generation, r.Leases = breaker.Open, r.Generation+1, nil
		r.OpenUntil, r.FailedProbes = clock.Now().Add(2*time.Minute).UnixNano(), 1
	})
	if p.Complete(breaker.Success) {
		t.Fatal("a probe of a generation another replica ended counted")
	}
	if r := h.stored(t); r.Version != moved.Version {
		t.Fatalf("stored version %d; want %d (nothing written)", r.Version, moved.Version)
	}
}

// Over a Counter, a success whose reset conflicts because another replica has opened
// the circuit leaves that opening as it is: no second OPEN, no new deadline.
func TestCounterResetAfterAnotherReplicaOpenedWritesNothing(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	h := &esHookedCounter{esHooked: esNewHooked()}
	c := ruleCircuit(t, h, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
	outcome(t, c, breaker.Failure)
	opened := esEdit(t, h.m, func(r *sharedstate.Record) {
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
	p := esAcquire(t, c)
	esEdit(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Failures = 3 }) // tripped, OPEN not yet written
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
		h := esNewHooked()
		var d sharedstate.Driver = h
		if counter {
			d = &esHookedCounter{esHooked: h}
		}
		c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.MaxStaleness = time.Hour })
		p := esAcquire(t, c)
		moved := esEdit(t, h.m, func(r *sharedstate.Record) {
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
