package dynamo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// probeRound has every replica try once and returns the probes admitted; the others
// must be rejected with NotBefore wantNotBefore.
func probeRound(t *testing.T, f *fleet, wantNotBefore time.Time) []breaker.Permit {
	t.Helper()
	var probes []breaker.Permit
	for _, c := range f.r {
		p, err := c.Acquire(t.Context())
		var oe *breaker.OpenError
		switch {
		case err == nil:
			if !p.Probe() {
				t.Fatalf("%s: half-open circuit admitted a permit that is not a probe", c.Owner())
			}
			probes = append(probes, p)
		case errors.As(err, &oe):
			if !oe.NotBefore.Equal(wantNotBefore) {
				t.Fatalf("%s: NotBefore = %v; want %v", c.Owner(), oe.NotBefore, wantNotBefore)
			}
		default:
			t.Fatalf("%s: Acquire = %v; want a probe or an *OpenError", c.Owner(), err)
		}
	}
	return probes
}

func TestExactlyOneProbeAcrossReplicasAndItsSuccessClosesForAll(t *testing.T) {
	f := newFleet(t, 3, sharedPolicy())
	deadline := f.open()
	f.clk.Set(deadline)
	// Rejected siblings wait for the lease: now+1s (retry delay) < now+5s (lease).
	probes := probeRound(t, f, deadline.Add(5*time.Second))
	if len(probes) != 1 {
		t.Fatalf("%d probes across 3 replicas; want exactly 1", len(probes))
	}
	it := f.item()
	if it.State != breaker.HalfOpen || len(it.Leases) != 1 || it.Leases[0].Owner != "replica-0" {
		t.Fatalf("item = %+v; want half-open with one lease of replica-0", it)
	}
	if s := f.r[0].Snapshot(); s.State != breaker.HalfOpen || s.Probes != 1 {
		t.Fatalf("Snapshot = %+v; want half-open with 1 probe", s)
	}
	// Later in the lease, a rejection is told the retry delay... or the lease expiry,
	// whichever is later.
	f.clk.Advance(4500 * time.Millisecond)
	if got := probeRound(t, f, f.clk.Now().Add(time.Second)); len(got) != 0 {
		t.Fatalf("%d more probes while the lease holds; want 0", len(got))
	}
	if !probes[0].Complete(breaker.Success) {
		t.Fatal("probe Complete(Success) = false; want true")
	}
	if it := f.item(); it.State != breaker.Closed || it.Generation != gen0+3 || it.Failures != 0 {
		t.Fatalf("item after the probe succeeded = %+v; want closed in generation gen0+3, no failures", it)
	}
	mustAcquire(t, f.r[0]).Complete(breaker.Success)
	f.clk.Advance(time.Second) // within MaxStaleness every replica admits
	for _, c := range f.r {
		mustAcquire(t, c).Complete(breaker.Success)
		if s := c.Snapshot(); s.State != breaker.Closed || s.Generation != gen0+3 {
			t.Fatalf("%s: Snapshot = %+v; want closed generation %d", c.Owner(), s, gen0+3)
		}
	}
}

func TestExpiredLeaseIsTakenOverAndItsLateResultIgnored(t *testing.T) {
	f := newFleet(t, 2, sharedPolicy())
	deadline := f.open()
	f.clk.Set(deadline)
	lost := mustAcquire(t, f.r[0]) // replica-0 takes the probe, then hangs
	mustReject(t, f.r[1])
	f.clk.Advance(5 * time.Second) // the lease expires
	taken := mustAcquire(t, f.r[1])
	if !taken.Probe() {
		t.Fatal("takeover permit is not a probe")
	}
	it := f.item()
	if len(it.Leases) != 1 || it.Leases[0].Owner != "replica-1" {
		t.Fatalf("leases = %+v; want only replica-1's", it.Leases)
	}
	if lost.Complete(breaker.Success) {
		t.Fatal("Complete of an expired, taken-over probe = true; want false")
	}
	if got := f.item(); got.Version != it.Version {
		t.Fatalf("late result changed the item: %+v; was %+v", got, it)
	}
	if !taken.Complete(breaker.Success) || f.item().State != breaker.Closed {
		t.Fatalf("takeover probe's success did not close: %+v", f.item())
	}
}

func TestExpiredLeaseResultIgnoredEvenWithoutTakeover(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	f.clk.Set(f.open())
	p := mustAcquire(t, f.r[0])
	f.clk.Advance(5 * time.Second)
	before := f.item()
	if p.Complete(breaker.Failure) {
		t.Fatal("Complete after the lease expired = true; want false")
	}
	if got := f.item(); got.Version != before.Version {
		t.Fatalf("expired probe's result changed the item: %+v", got)
	}
}

func TestProbeOfAnOlderGenerationIsIgnored(t *testing.T) {
	f := newFleet(t, 2, sharedPolicy())
	f.clk.Set(f.open())
	old := mustAcquire(t, f.r[0])
	f.clk.Advance(5 * time.Second)
	// replica-1 takes over and its probe fails: the circuit opens in a new generation.
	newer := mustAcquire(t, f.r[1])
	if !newer.Complete(breaker.Failure) {
		t.Fatal("probe Complete(Failure) = false; want true")
	}
	reopened := f.item()
	if reopened.State != breaker.Open || reopened.Generation != old.Generation()+1 {
		t.Fatalf("item = %+v; want open in generation %d", reopened, old.Generation()+1)
	}
	if old.Complete(breaker.Success) {
		t.Fatal("Complete(Success) of an older generation's probe = true; want false")
	}
	if got := f.item(); got.Version != reopened.Version {
		t.Fatalf("stale probe changed the item: %+v; was %+v", got, reopened)
	}
}

func TestNeutralProbeReleasesItsSlot(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	f.clk.Set(f.open())
	c := f.r[0]
	p := mustAcquire(t, c)
	if !p.Complete(breaker.Neutral) {
		t.Fatal("probe Complete(Neutral) = false; want true")
	}
	if it := f.item(); it.State != breaker.HalfOpen || len(it.Leases) != 0 {
		t.Fatalf("item = %+v; want half-open with no lease", it)
	}
	if again := mustAcquire(t, c); !again.Probe() || !again.Complete(breaker.Success) {
		t.Fatal("the released slot did not admit a probe that closes")
	}
}

func TestFailedProbesDoubleTheBreakUpToTheMaximum(t *testing.T) {
	p := sharedPolicy()
	p.MaxBreakDuration = 30 * time.Second
	f := newFleet(t, 1, p)
	c := f.r[0]
	f.clk.Set(f.open())
	for _, want := range []time.Duration{20 * time.Second, 30 * time.Second, 30 * time.Second} {
		probe := mustAcquire(t, c)
		now := f.clk.Now()
		if !probe.Complete(breaker.Failure) {
			t.Fatal("probe Complete(Failure) = false; want true")
		}
		it := f.item()
		if got := time.Unix(0, it.OpenUntil).Sub(now); it.State != breaker.Open || got != want {
			t.Fatalf("after a failed probe: %v for %v; want open for %v", it.State, got, want)
		}
		if oe := mustReject(t, c); !oe.NotBefore.Equal(time.Unix(0, it.OpenUntil)) {
			t.Fatalf("NotBefore = %v; want %v", oe.NotBefore, time.Unix(0, it.OpenUntil))
		}
		f.clk.Set(time.Unix(0, it.OpenUntil))
	}
	if !mustAcquire(t, c).Complete(breaker.Success) {
		t.Fatal("probe Complete(Success) = false")
	}
	fail(t, c, 3) // closed again with the failed-probe count reset: the next break is 10s
	if it := f.item(); time.Unix(0, it.OpenUntil).Sub(f.clk.Now()) != 10*time.Second || it.FailedProbes != 0 {
		t.Fatalf("item = %+v; want a 10s break after closing", it)
	}
}

func TestSeveralProbesAndSuccessesToClose(t *testing.T) {
	p := sharedPolicy()
	p.HalfOpenMaxProbes = 2
	p.SuccessesToClose = 2
	f := newFleet(t, 3, p)
	f.clk.Set(f.open())
	probes := probeRound(t, f, f.clk.Now().Add(5*time.Second))
	if len(probes) != 2 {
		t.Fatalf("%d probes across 3 replicas; want HalfOpenMaxProbes = 2", len(probes))
	}
	probes[0].Complete(breaker.Success)
	if it := f.item(); it.State != breaker.HalfOpen || it.Successes != 1 || len(it.Leases) != 1 {
		t.Fatalf("item after one success = %+v; want half-open, 1 success, 1 lease", it)
	}
	probes[1].Complete(breaker.Success)
	if it := f.item(); it.State != breaker.Closed {
		t.Fatalf("item after two successes = %+v; want closed", it)
	}
}

func TestJitterSpreadsTheBreak(t *testing.T) {
	p := sharedPolicy()
	p.Jitter = 0.5
	f := newFleet(t, 1, p, sharedstate.WithRandom(func() float64 { return 0 }))
	deadline := f.open()
	if got := deadline.Sub(t0); got != 5*time.Second {
		t.Fatalf("break with jitter 0.5 at the low end = %v; want 5s", got)
	}
}

// A probe lease whose write reached the table but whose answer was lost
// is found by reading the item again: the caller gets its probe, or, when its context
// ended meanwhile, the lease is given back so that another replica can probe at once
// rather than after the lease runs out.
func TestLeaseWriteWithLostAnswer(t *testing.T) {
	t.Run("caller still waiting gets the probe", func(t *testing.T) {
		f := newFleet(t, 2, sharedPolicy())
		deadline := f.open()
		f.clk.Set(deadline)
		f.st.lostAnswer = func() error { return errDown }
		p := mustAcquire(t, f.r[0])
		if !p.Probe() {
			t.Fatal("the permit is not a probe")
		}
		if !p.Complete(breaker.Success) {
			t.Fatal("the probe whose lease write lost its answer did not count")
		}
		if it := f.item(); it.State != breaker.Closed {
			t.Fatalf("item = %+v; want closed by the probe", it)
		}
	})
	t.Run("caller gone gives the lease back", func(t *testing.T) {
		f := newFleet(t, 2, sharedPolicy())
		deadline := f.open()
		f.clk.Set(deadline)
		ctx, cancel := context.WithCancel(t.Context())
		f.st.lostAnswer = func() error { cancel(); return context.Canceled }
		if _, err := f.r[0].Acquire(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire whose context ended during the lease write = %v; want context.Canceled", err)
		}
		if it := f.item(); it.State != breaker.HalfOpen || len(it.Leases) != 0 {
			t.Fatalf("item = %+v; want half-open with the stranded lease given back", it)
		}
		if p := mustAcquire(t, f.r[1]); !p.Probe() {
			t.Fatal("another replica's call is not a probe")
		}
	})
}
