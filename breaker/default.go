package breaker

import "time"

// DefaultPolicy returns the recommended policy for a publisher's destination: open
// after 5 consecutive failures, and while open admit one probe every 550 ms (spread
// by ±10 % so that replicas do not probe in lockstep), never doubling the break. One
// probe at a time closes the circuit on its success; it may take up to 10 seconds
// (ProbeLease, longer than publishers' deadlines) before it is presumed lost.
//
// The short, steady break is what makes the circuit safe to leave on. A broker that
// refuses or errors gets one call per break while it is down, and a hung one a single
// call at a time (a probe that misses its deadline lets the next probe in soon after
// it, missed.go), so the broker carries almost nothing; yet a broker that comes
// back is seen within about a second, and one that comes and goes (flapping) is used
// in every window it is up. A long or doubling break would refuse a recovered broker
// for tens of seconds to minutes, worse for the callers than no breaker at all.
// Sharing the load of a destination that accepts part of its calls is admission
// control's work (package admission, and registry.DefaultPolicy, which turns it on),
// not the circuit's.
//
// Change fields on the returned value for a destination that needs more or less
// patience, for example:
//
//	p := breaker.DefaultPolicy()
//	p.FailureThreshold = 2 // payments: open sooner
func DefaultPolicy() Policy {
	return Policy{
		FailureThreshold: 5,
		BreakDuration:    550 * time.Millisecond,
		ProbeLease:       10 * time.Second,
		Jitter:           0.1,
	}
}

// DisabledPolicy returns a policy whose circuits never open, said on purpose
// (Disabled): every call is admitted and nothing is counted against the destination.
// Give it to registry.WithOverride for a destination that must never be refused,
// or set MaxInFlight on it for a bulkhead without a breaker.
func DisabledPolicy() Policy { return Policy{Disabled: true} }
