package breaker

import (
	"time"

	"github.com/brokerguard/brokerguard/breaker/internal/link"
)

// The constructors and rules that backends (package breaker/backend) share with the
// local breaker, lent through package link so that they are not in this package's
// index.
func init() {
	link.NewPermit = newPermit
	link.NewOpenError = newOpenError
	link.NewRamp = func(identity string, p Policy, closedAt time.Time, seed uint64) (
		admit func(time.Duration) (float64, *OpenError), refuse func(time.Duration) *OpenError, until time.Time) {
		r := newRamp(identity, p, closedAt, seed)
		if r == nil {
			return nil, nil, time.Time{}
		}
		return r.admit, r.refuse, r.until()
	}
	link.Normalize = Policy.normalized
	link.RampShare = Policy.rampShare
	link.BreakAfter = Policy.breakAfter
}
