package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// RecommendedLimit is what its comment says, with every default written out (a
// Window of 100ms), so that a policy built on it compares equal to its Normalized
// form and shows the window it runs with.
func TestRecommendedLimitIsWrittenOut(t *testing.T) {
	got := breaker.RecommendedLimit()
	want := breaker.LimitPolicy{Max: 1000, Min: 1, Tolerance: 2, BulkShare: 0.5, Window: 100 * time.Millisecond}
	if got != want {
		t.Fatalf("RecommendedLimit() = %+v, want %+v", got, want)
	}
	p := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, Limit: got}
	if n := p.Normalized(); n.Limit != got {
		t.Fatalf("Normalized changed the recommended limit: %+v", n.Limit)
	}
}
