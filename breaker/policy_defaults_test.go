package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// Normalized writes out each "0 means" default and keeps every value that was set.
func TestNormalizedWritesOutEachDefault(t *testing.T) {
	zero := breaker.Policy{FailureThreshold: 1, BreakDuration: 3 * time.Second, RampDuration: time.Minute}
	got := backend.Normalize(zero)
	want := zero
	want.HalfOpenMaxProbes, want.SuccessesToClose, want.ProbeLease = 1, 1, 3*time.Second
	want.HalfOpenRetryDelay, want.MaxBreakDuration = time.Second, 3*time.Second
	want.RampFloor, want.RampAggression = 0.1, 1
	if got != want {
		t.Fatalf("Normalized of defaults:\n got %+v\nwant %+v", got, want)
	}

	set := breaker.Policy{FailureThreshold: 1, BreakDuration: 3 * time.Second, HalfOpenMaxProbes: 4, SuccessesToClose: 2,
		ProbeLease: 5 * time.Second, HalfOpenRetryDelay: 7 * time.Millisecond, MaxBreakDuration: time.Minute,
		RampDuration: time.Minute, RampFloor: 0.3, RampAggression: 2}
	if got := backend.Normalize(set); got != set {
		t.Fatalf("Normalized changed set values:\n got %+v\nwant %+v", got, set)
	}
	if got := backend.Normalize(breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}); got.RampFloor != 0 || got.RampAggression != 0 {
		t.Fatalf("Normalized without a ramp wrote ramp defaults: floor %v aggression %v", got.RampFloor, got.RampAggression)
	}
}

// BreakAfter doubles BreakDuration per failed probe up to MaxBreakDuration, then
// spreads it by Jitter, drawing a random number only when Jitter is set.
func TestBreakAfterDoublesUpToTheMaximumThenJitters(t *testing.T) {
	noRandom := func() float64 { t.Fatal("random called without Jitter"); return 0 }
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 8 * time.Second}
	for probes, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second} {
		if got := backend.BreakAfter(p, probes, noRandom); got != want {
			t.Errorf("BreakAfter(%d) = %v, want %v", probes, got, want)
		}
	}
	capped := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 3 * time.Second}
	if got := backend.BreakAfter(capped, 2, noRandom); got != 3*time.Second {
		t.Errorf("BreakAfter(2) capped at 3s = %v", got)
	}
	if got := backend.BreakAfter(breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}, 5, noRandom); got != time.Second {
		t.Errorf("BreakAfter(5) without MaxBreakDuration = %v, want 1s", got)
	}
	if got := backend.BreakAfter(breaker.Policy{}, 0, noRandom); got != 1 {
		t.Errorf("BreakAfter of a zero BreakDuration = %v, want 1ns", got)
	}
	j := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 8 * time.Second, Jitter: 0.5}
	for _, c := range []struct {
		probes int
		r      float64
		want   time.Duration
	}{
		{0, 0.75, 1250 * time.Millisecond},
		{0, 0, 500 * time.Millisecond},
		{0, 0.5, time.Second},
		{1, 0.25, 1500 * time.Millisecond},
	} {
		if got := backend.BreakAfter(j, c.probes, func() float64 { return c.r }); got != c.want {
			t.Errorf("BreakAfter(%d) with random %v = %v, want %v", c.probes, c.r, got, c.want)
		}
	}
}
