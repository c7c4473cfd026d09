package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// BreakAfter is BreakDuration doubled per failed probe, capped at MaxBreakDuration:
// a doubling that stays within the maximum is taken as it is, also when it lands one
// nanosecond short of an odd maximum (whose half rounds down to the break before it).
func TestBreakAfterDoublesExactlyBelowAnOddMaximum(t *testing.T) {
	noRandom := func() float64 { panic("random read without Jitter") }
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxBreakDuration: 2*time.Second + 1}
	for probes, want := range []time.Duration{time.Second, 2 * time.Second, 2*time.Second + 1, 2*time.Second + 1} {
		if got := backend.BreakAfter(p, probes, noRandom); got != want {
			t.Errorf("BreakAfter(%d) with a maximum of %v = %v, want %v", probes, p.MaxBreakDuration, got, want)
		}
	}
}
