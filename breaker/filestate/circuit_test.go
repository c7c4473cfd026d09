package filestate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

func TestOpensAtThresholdAndRejectsUntilTheBreakEnds(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	call(t, c, breaker.Failure)
	call(t, c, breaker.Failure)
	wantState(t, c, breaker.Closed)
	call(t, c, breaker.Failure)

	s := wantState(t, c, breaker.Open)
	if s.Failures != 3 || s.Scope != breaker.SingleHost || s.Identity != "kafka:orders" {
		t.Fatalf("snapshot %+v, want 3 failures of kafka:orders in scope SINGLE_HOST", s)
	}
	oe := rejected(t, c)
	if want := t0.Add(time.Minute); !oe.NotBefore.Equal(want) || !s.NotBefore.Equal(want) {
		t.Fatalf("NotBefore %v (snapshot %v), want %v", oe.NotBefore, s.NotBefore, want)
	}
	if oe.Identity != "kafka:orders" {
		t.Fatalf("rejection names %q", oe.Identity)
	}
	// Rejections do not extend the break, however long they go on.
	e.clock.Advance(59 * time.Second)
	if again := rejected(t, c); !again.NotBefore.Equal(oe.NotBefore) {
		t.Fatalf("NotBefore moved to %v", again.NotBefore)
	}
	// Another process sees the same open circuit.
	if other := rejected(t, e.circuit("kafka:orders", policy)); !other.NotBefore.Equal(oe.NotBefore) {
		t.Fatalf("other process: NotBefore %v, want %v", other.NotBefore, oe.NotBefore)
	}
}

func TestSuccessResetsTheConsecutiveCount(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	call(t, c, breaker.Failure)
	call(t, c, breaker.Failure)
	call(t, c, breaker.Success)
	if s := wantState(t, c, breaker.Closed); s.Failures != 0 {
		t.Fatalf("failures %d after a success", s.Failures)
	}
	call(t, c, breaker.Failure)
	call(t, c, breaker.Failure)
	wantState(t, c, breaker.Closed)
	call(t, c, breaker.Failure)
	wantState(t, c, breaker.Open)
}

func TestFailuresOfSeveralProcessesAddUp(t *testing.T) {
	e := newEnv(t)
	a, b := e.circuit("kafka:orders", policy), e.circuit("kafka:orders", policy)
	call(t, a, breaker.Failure)
	call(t, b, breaker.Failure)
	call(t, a, breaker.Failure)
	wantState(t, a, breaker.Open)
	rejected(t, a)
}

func TestNeutralChangesNothing(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	call(t, c, breaker.Failure)
	call(t, c, breaker.Failure)
	before := c.Snapshot()
	for range 5 {
		call(t, c, breaker.Neutral)
	}
	if !acquire(t, c).Complete(0) { // the zero Outcome is Neutral
		t.Fatal("zero outcome of a live permit returned false")
	}
	if after := c.Snapshot(); after != before {
		t.Fatalf("snapshot %+v became %+v", before, after)
	}
}

func TestOneProbeThenSuccessCloses(t *testing.T) {
	e := newEnv(t)
	a, b := e.circuit("kafka:orders", policy), e.circuit("kafka:orders", policy)
	for range 3 {
		call(t, a, breaker.Failure)
	}
	opened := wantState(t, a, breaker.Open).Generation
	e.clock.Advance(time.Minute)

	probe := acquire(t, a)
	if !probe.Probe() || probe.Generation() != opened+1 {
		t.Fatalf("probe %v generation %d, want a probe of generation %d", probe.Probe(), probe.Generation(), opened+1)
	}
	// The sibling waits for the probe's lease (ProbeLease 0 means BreakDuration),
	// which is later than the retry delay.
	if oe := rejected(t, b); !oe.NotBefore.Equal(e.clock.Now().Add(time.Minute)) {
		t.Fatalf("sibling NotBefore %v, want the lease expiry %v", oe.NotBefore, e.clock.Now().Add(time.Minute))
	}
	if s := wantState(t, b, breaker.HalfOpen); s.Probes != 1 {
		t.Fatalf("probes %d, want 1", s.Probes)
	}
	if !probe.Complete(breaker.Success) {
		t.Fatal("the probe's success was not taken into account")
	}
	s := wantState(t, a, breaker.Closed)
	if s.Generation != opened+2 || s.Failures != 0 {
		t.Fatalf("snapshot %+v, want generation %d with no failures", s, opened+2)
	}
	// The sibling's cached rejection runs out with its staleness bound.
	e.clock.Advance(staleness)
	call(t, b, breaker.Success)
}

func TestSiblingRetryDelayWhenTheLeaseIsShort(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.ProbeLease, p.HalfOpenRetryDelay = 100*time.Millisecond, 5*time.Second
	c := e.circuit("kafka:orders", p)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	e.clock.Advance(time.Minute)
	acquire(t, c)
	if oe := rejected(t, e.circuit("kafka:orders", p)); !oe.NotBefore.Equal(e.clock.Now().Add(5 * time.Second)) {
		t.Fatalf("NotBefore %v, want now + HalfOpenRetryDelay", oe.NotBefore)
	}
}

func TestFailedProbesDoubleTheBreakUpToTheMaximum(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.MaxBreakDuration = 4 * time.Minute
	c := e.circuit("kafka:orders", p)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	for _, want := range []time.Duration{2 * time.Minute, 4 * time.Minute, 4 * time.Minute} {
		e.clock.Set(c.Snapshot().NotBefore)
		probe := acquire(t, c)
		if !probe.Probe() || !probe.Complete(breaker.Failure) {
			t.Fatal("probe not admitted or its failure not counted")
		}
		if got := wantState(t, c, breaker.Open).NotBefore.Sub(e.clock.Now()); got != want {
			t.Fatalf("break %v, want %v", got, want)
		}
	}
	// A success closes and forgets the failed probes: the next break is the base one.
	e.clock.Set(c.Snapshot().NotBefore)
	acquire(t, c).Complete(breaker.Success)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	if got := c.Snapshot().NotBefore.Sub(e.clock.Now()); got != time.Minute {
		t.Fatalf("break %v after closing, want %v", got, time.Minute)
	}
}

func TestJitterSpreadsTheBreak(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.Jitter = 0.5
	c := e.circuit("kafka:orders", p, sharedstate.WithRandom(func() float64 { return 0 }))
	for range 3 {
		call(t, c, breaker.Failure)
	}
	if got := c.Snapshot().NotBefore.Sub(e.clock.Now()); got != 30*time.Second {
		t.Fatalf("break %v, want 30s (one minute less half)", got)
	}
}

func TestExpiredProbeIsTakenOverAndItsLateOutcomeIsStale(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.ProbeLease = 10 * time.Second
	a, b := e.circuit("kafka:orders", p), e.circuit("kafka:orders", p)
	for range 3 {
		call(t, a, breaker.Failure)
	}
	e.clock.Advance(time.Minute)
	lost := acquire(t, a)
	e.clock.Advance(10*time.Second - time.Nanosecond)
	rejected(t, b)
	e.clock.Advance(time.Nanosecond)
	b = e.circuit("kafka:orders", p) // b itself was told to come back after the retry delay
	taker := acquire(t, b)
	if !taker.Probe() || taker.Generation() != lost.Generation() {
		t.Fatalf("takeover: probe %v generation %d, want a probe of generation %d", taker.Probe(), taker.Generation(), lost.Generation())
	}
	if lost.Complete(breaker.Failure) {
		t.Fatal("the expired probe's late failure counted")
	}
	if s := wantState(t, b, breaker.HalfOpen); s.Probes != 1 {
		t.Fatalf("the late failure changed the state: %+v", s)
	}
	if !taker.Complete(breaker.Success) {
		t.Fatal("the taker's success did not count")
	}
	wantState(t, b, breaker.Closed)
}

func TestProbeCompletedAfterItsLeaseIsStaleEvenIfNobodyTookOver(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	e.clock.Advance(time.Minute)
	probe := acquire(t, c)
	e.clock.Advance(time.Minute)
	if probe.Complete(breaker.Success) {
		t.Fatal("a probe completed after its lease counted")
	}
	if s := wantState(t, c, breaker.HalfOpen); s.Probes != 0 {
		t.Fatalf("the expired probe still holds a slot: %+v", s)
	}
	if !acquire(t, c).Probe() {
		t.Fatal("the freed slot was not given to the next caller")
	}
}

func TestNeutralProbeReleasesItsSlot(t *testing.T) {
	e := newEnv(t)
	a, b := e.circuit("kafka:orders", policy), e.circuit("kafka:orders", policy)
	for range 3 {
		call(t, a, breaker.Failure)
	}
	e.clock.Advance(time.Minute)
	if !acquire(t, a).Complete(breaker.Neutral) {
		t.Fatal("a neutral probe of the live generation returned false")
	}
	wantState(t, a, breaker.HalfOpen)
	if !acquire(t, b).Probe() {
		t.Fatal("the released slot did not admit another probe")
	}
}

func TestSeveralProbesAndSuccessesToClose(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.HalfOpenMaxProbes, p.SuccessesToClose = 2, 2
	c := e.circuit("kafka:orders", p)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	e.clock.Advance(time.Minute)
	p1, p2 := acquire(t, c), acquire(t, c)
	rejected(t, c)
	p1.Complete(breaker.Success)
	wantState(t, c, breaker.HalfOpen)
	p3 := acquire(t, c)
	p2.Complete(breaker.Success)
	wantState(t, c, breaker.Closed)
	if p3.Complete(breaker.Failure) {
		t.Fatal("a probe of the half-open generation counted after the circuit closed")
	}
	wantState(t, c, breaker.Closed)
}

func TestLateAndRepeatedCompletionsChangeNothing(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	early := acquire(t, c)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	if early.Complete(breaker.Failure) || early.Complete(breaker.Success) {
		t.Fatal("a permit of the closed generation counted after the circuit opened")
	}
	e.clock.Advance(time.Minute)
	probe := acquire(t, c)
	if !probe.Complete(breaker.Success) {
		t.Fatal("probe success did not count")
	}
	if probe.Complete(breaker.Failure) {
		t.Fatal("a second completion counted")
	}
	before := wantState(t, c, breaker.Closed)
	// A permit of the first closed generation cannot touch the new closed one.
	if early.Complete(breaker.Failure) {
		t.Fatal("an old generation's failure counted")
	}
	if after := c.Snapshot(); after != before {
		t.Fatalf("snapshot %+v became %+v", before, after)
	}
}

func TestClosedAdmissionIsServedFromTheSnapshot(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	call(t, c, breaker.Success)
	// Replace the record behind the circuit's back: until the snapshot is three
	// quarters stale no Acquire reads it; then one does, and fails closed.
	if err := os.WriteFile(e.statePath("kafka:orders"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(staleness*3/4 - time.Nanosecond)
	for range 3 {
		call(t, c, breaker.Success)
	}
	e.clock.Advance(time.Nanosecond)
	unavailable(t, c, filestate.ErrCorrupt)
}

func TestAnotherProcessesOpenCircuitIsSeenWithinTheStalenessBound(t *testing.T) {
	e := newEnv(t)
	a, b := e.circuit("kafka:orders", policy), e.circuit("kafka:orders", policy)
	call(t, b, breaker.Success) // b now holds a fresh closed snapshot
	for range 3 {
		call(t, a, breaker.Failure)
	}
	acquire(t, b).Complete(breaker.Neutral) // still within b's bound
	e.clock.Advance(staleness)
	rejected(t, b)
}

func TestSuccessResetsFailuresRecordedByAnotherProcess(t *testing.T) {
	e := newEnv(t)
	a, b := e.circuit("kafka:orders", policy), e.circuit("kafka:orders", policy)
	call(t, a, breaker.Failure)
	call(t, a, breaker.Failure)
	e.clock.Advance(staleness)
	call(t, b, breaker.Success) // b's snapshot shows the failures, so the success writes
	e.clock.Advance(staleness)
	if s := wantState(t, a, breaker.Closed); s.Failures != 0 {
		t.Fatalf("failures %d after b's success", s.Failures)
	}
	call(t, a, breaker.Failure)
	wantState(t, a, breaker.Closed)
}

func TestZeroStalenessReadsTheFileEveryTime(t *testing.T) {
	e := newEnv(t)
	a := e.circuit("kafka:orders", policy, sharedstate.WithMaxStaleness(0))
	b := e.circuit("kafka:orders", policy)
	call(t, a, breaker.Success)
	for range 3 {
		call(t, b, breaker.Failure)
	}
	rejected(t, a)
}

func TestDisabledPolicyNeverOpens(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", breaker.Policy{Scope: breaker.SingleHost})
	for range 10 {
		call(t, c, breaker.Failure)
	}
	if s := wantState(t, c, breaker.Closed); s.Failures != 0 {
		t.Fatalf("a disabled circuit counted %d failures", s.Failures)
	}
}

func TestMaxInFlightBoundsThisProcess(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.MaxInFlight = 1
	a, b := e.circuit("kafka:orders", p), e.circuit("kafka:orders", p)
	held := acquire(t, a)
	if _, err := a.Acquire(context.Background()); !errors.Is(err, breaker.ErrSaturated) {
		t.Fatalf("second Acquire: %v, want ErrSaturated", err)
	}
	if s := a.Snapshot(); s.InFlight != 1 {
		t.Fatalf("InFlight %d, want 1", s.InFlight)
	}
	acquire(t, b).Complete(breaker.Success) // another process has its own bound
	held.Complete(breaker.Success)
	call(t, a, breaker.Success)
}

func TestSlowSuccessCountsAsFailure(t *testing.T) {
	e := newEnv(t)
	p := policy
	p.FailureThreshold, p.SlowCallDuration = 1, time.Second
	c := e.circuit("kafka:orders", p)
	call(t, c, breaker.Success)
	slow := acquire(t, c)
	e.clock.Advance(2 * time.Second)
	slow.Complete(breaker.Success)
	wantState(t, c, breaker.Open)
}

func TestAcquireWithEndedContextChangesNothing(t *testing.T) {
	e := newEnv(t)
	c := e.circuit("kafka:orders", policy)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(e.statePath("kafka:orders")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a cancelled Acquire created the record (stat: %v)", err)
	}
}

func TestClearStartsAFreshGenerationAndOldPermitsStayStale(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	c, err := s.Circuit("kafka:orders", policy)
	if err != nil {
		t.Fatal(err)
	}
	old := acquire(t, c)
	for range 3 {
		call(t, c, breaker.Failure)
	}
	e.clock.Advance(time.Second)
	if err := s.Clear("kafka:orders"); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	p := acquire(t, c) // this store's snapshot was dropped with the record
	if p.Generation() <= old.Generation() {
		t.Fatalf("generation %d after Clear, want above %d", p.Generation(), old.Generation())
	}
	if old.Complete(breaker.Failure) {
		t.Fatal("a permit issued before Clear counted")
	}
	p.Complete(breaker.Success)
	if snap := wantState(t, c, breaker.Closed); snap.Failures != 0 {
		t.Fatalf("failures %d after Clear", snap.Failures)
	}
	if err := s.Clear("kafka:orders"); err != nil {
		t.Fatalf("Clear of a cleared circuit: %v", err)
	}
}

func TestWriteErrorOfACompletionGoesToTheHandler(t *testing.T) {
	e := newEnv(t)
	var got []error
	c := e.circuit("kafka:orders", policy, sharedstate.WithErrorHandler(func(err error) { got = append(got, err) }))
	p := acquire(t, c)
	if err := os.WriteFile(e.statePath("kafka:orders"), []byte(`{"version":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if p.Complete(breaker.Failure) {
		t.Fatal("a failure that could not be recorded reported true")
	}
	if len(got) != 1 || !errors.Is(got[0], filestate.ErrCorrupt) || !errors.Is(got[0], breaker.ErrUnavailable) {
		t.Fatalf("handler got %v, want one corrupt-record error", got)
	}
	// The snapshot was dropped, so the next Acquire fails closed at once.
	unavailable(t, c, filestate.ErrCorrupt)
}

func TestPolicyFingerprintMismatchIsRefused(t *testing.T) {
	e := newEnv(t)
	call(t, e.circuit("kafka:orders", policy), breaker.Success)
	other := policy
	other.FailureThreshold = 5
	err := unavailable(t, e.circuit("kafka:orders", other), filestate.ErrPolicyMismatch)
	var pm *sharedstate.PolicyMismatchError
	if !errors.As(err, &pm) || len(pm.Fields) != 1 || pm.Fields[0] != "FailureThreshold: stored 3, ours 5" || pm.Identity != "kafka:orders" {
		t.Fatalf("error %v, want FailureThreshold named", err)
	}
	// Within one store, the same identity cannot be had under two policies.
	s := e.store()
	if _, err := s.Circuit("kafka:orders", policy); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Circuit("kafka:orders", other); !errors.As(err, &pm) || !strings.Contains(err.Error(), "FailureThreshold") {
		t.Fatalf("Circuit with another policy: %v, want a *sharedstate.PolicyMismatchError naming the field", err)
	}
}

func TestSameIdentitySameCircuit(t *testing.T) {
	s := newEnv(t).store()
	a, _ := s.Circuit("kafka:orders", policy)
	b, _ := s.Circuit("kafka:orders", policy)
	c, _ := s.Circuit("kafka:payments", policy)
	if a != b || a == c || a == nil {
		t.Fatal("want one circuit per identity")
	}
}

func TestScopesAndModesRefused(t *testing.T) {
	s := newEnv(t).store()
	for _, tc := range []struct {
		name  string
		p     breaker.Policy
		field string
	}{
		{"local scope", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}, "Scope"},
		{"shared scope", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Scope: breaker.SharedDependency}, "Scope"},
		{"window mode", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, FailureWindow: time.Minute, Scope: breaker.SingleHost}, "FailureWindow"},
		{"invalid", breaker.Policy{FailureThreshold: 1, Scope: breaker.SingleHost}, "BreakDuration"},
		{"fail-open mode", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Scope: breaker.SingleHost, Mode: breaker.FailOpen}, "Mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Circuit("kafka:orders", tc.p)
			var pe *breaker.PolicyError
			if !errors.As(err, &pe) || pe.Field != tc.field || !errors.As(err, new(*breaker.PolicyError)) {
				t.Fatalf("Circuit: %v, want a policy error naming %s", err, tc.field)
			}
		})
	}
	// And the local breaker refuses this backend's scope.
	if _, err := breaker.New("kafka:orders", policy); !errors.As(err, new(*breaker.PolicyError)) {
		t.Fatalf("breaker.New with scope SINGLE_HOST: %v, want a refusal", err)
	}
}

func TestIdentityValidation(t *testing.T) {
	s := newEnv(t).store()
	long := "a"
	for len(long) < filestate.MaxIdentityLen {
		long += "b"
	}
	for _, id := range []string{"kafka:orders", "A", "sqs:eu-west-1.orders_v2", long} {
		if _, err := s.Circuit(id, policy); err != nil {
			t.Errorf("Circuit(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", "1kafka", ":orders", "kafka orders", "kafka/orders", "../etc", "kafka:ordérs", long + "c", "a\x00b"} {
		if _, err := s.Circuit(id, policy); !errors.Is(err, filestate.ErrInvalidIdentity) {
			t.Errorf("Circuit(%q): %v, want ErrInvalidIdentity", id, err)
		}
		if err := s.Clear(id); !errors.Is(err, filestate.ErrInvalidIdentity) {
			t.Errorf("Clear(%q): %v, want ErrInvalidIdentity", id, err)
		}
	}
}

// BenchmarkClosedAdmission compares Acquire + Complete(Success) on a healthy closed
// circuit: the local breaker against a file circuit served by its snapshot (the wall
// clock, default staleness; the file is read about every 250ms).
func BenchmarkClosedAdmission(b *testing.B) {
	p := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}
	local, err := breaker.New("kafka:orders", p)
	if err != nil {
		b.Fatal(err)
	}
	s, err := filestate.Open(filepath.Join(b.TempDir(), "circuits"))
	if err != nil {
		b.Fatal(err)
	}
	p.Scope = breaker.SingleHost
	file, err := s.Circuit("kafka:orders", p)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		c    breaker.Circuit
	}{{"local", local}, {"filestate", file}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					permit, err := bc.c.Acquire(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if !permit.Complete(breaker.Success) {
						b.Fatal("a success on a closed circuit did not count")
					}
				}
			})
		})
	}
}
