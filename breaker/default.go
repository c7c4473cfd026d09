package breaker

import "time"

// DefaultPolicy returns the recommended policy for a publisher's destination: open
// after 5 consecutive failures, stay open 30 seconds, double the break after each
// failed probe up to 5 minutes, and spread every break by ±20 % so that replicas do
// not probe in lockstep. One probe at a time closes the circuit on its success; a
// deadline counts against the broker only for calls that started with
// DefaultMinCallBudget. The adaptive limit is on (RecommendedLimit): calls in flight
// follow the destination's latency, bulk work such as the outbox yields to online
// calls, and a deadline missed while the destination is busy with this process's own
// bulk work, or in a cold process's first wave, is not held against the broker
// (docs/slowness.md). Set Limit to the zero LimitPolicy to turn it off.
//
// Change fields on the returned value for a destination that needs more or less
// patience, for example:
//
//	p := breaker.DefaultPolicy()
//	p.FailureThreshold = 2 // payments: open sooner
func DefaultPolicy() Policy {
	return Policy{
		FailureThreshold: 5,
		BreakDuration:    30 * time.Second,
		Limit:            RecommendedLimit(),
		MaxBreakDuration: 5 * time.Minute,
		Jitter:           0.2,
	}
}

// DisabledPolicy returns a policy whose circuits never open, said on purpose
// (Disabled): every call is admitted and nothing is counted against the destination.
// Give it to registry.WithOverride for a destination that must never be refused,
// or set MaxInFlight on it for a bulkhead without a breaker.
func DisabledPolicy() Policy { return Policy{Disabled: true} }
