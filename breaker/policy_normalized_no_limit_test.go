package breaker_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Normalized writes out no limit defaults for a policy without a limit (Max 0): the
// limit stays zero, so policies without a limit compare equal however their other
// limit fields were left.
func TestNormalizedWithoutALimitLeavesItZero(t *testing.T) {
	for _, lp := range []breaker.LimitPolicy{{}, {Window: time.Second, BulkShare: 0.25}} {
		p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Limit: lp}
		if got := p.Normalized().Limit; got != (breaker.LimitPolicy{}) {
			t.Fatalf("Normalized of a policy without a limit (%+v) wrote out %+v", lp, got)
		}
	}
}
