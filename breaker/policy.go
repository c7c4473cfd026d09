package breaker

import (
	"fmt"
	"math"
	"time"
)

// Policy configures a circuit. Start from DefaultPolicy and change what you need.
//
// A Policy with FailureThreshold 0 describes a circuit that never opens. The breaker
// accepts it, but registry.New and registry.WithOverride refuse it unless Disabled
// says so on purpose: a zero Policy left by mistake would protect nothing, silently.
type Policy struct {
	// FailureThreshold is the number of failures that opens the circuit. 0 disables the
	// circuit (MaxInFlight still applies, which makes it a pure bulkhead).
	FailureThreshold int
	// BreakDuration is how long the circuit stays open before it admits a probe.
	// Required when FailureThreshold is set. A failed probe reopens the circuit until
	// a break after the probe was admitted, and for at least a tenth of BreakDuration
	// after it failed, so that a hung broker is probed back to back, one call at a
	// time (missed.go).
	BreakDuration time.Duration
	// FailureWindow selects the counting mode. 0 counts consecutive failures; a
	// positive value counts failures inside this trailing window.
	FailureWindow time.Duration
	// MinimumCalls is, in window mode, the number of calls (Success or Failure) the
	// window must hold before it may open the circuit.
	MinimumCalls int
	// FailureRatio is, in window mode, the fraction failures/calls that must also be
	// reached to open. 0 ignores the ratio.
	FailureRatio float64
	// SlowCallDuration, when positive, makes a Success that took longer a slow call:
	// slow calls are a rate of their own, never failures, and are judged only once
	// the circuit has a latency baseline (see slow.go: FailureThreshold slow calls in
	// a row open a consecutive circuit; in window mode SlowCallRatio of the window's
	// calls, with MinimumCalls and FailureThreshold, open it). With admission control
	// on (package admission) most publishers need no SlowCallDuration at all.
	SlowCallDuration time.Duration
	// SlowCallRatio is, in window mode, the share slow/calls of the window that opens
	// the circuit, within [0, 1]. 0 means 1. Applies only with SlowCallDuration.
	SlowCallRatio float64
	// HalfOpenMaxProbes is the number of probes in flight at once while half-open.
	// 0 means 1.
	HalfOpenMaxProbes int
	// SuccessesToClose is the number of consecutive probe successes that closes the
	// circuit. 0 means 1.
	SuccessesToClose int
	// ProbeLease is how long a probe may stay uncompleted before it is presumed lost
	// and its slot is given to another caller. 0 means BreakDuration. Set it above
	// the callers' deadlines for a hung broker to carry one probe at a time.
	ProbeLease time.Duration
	// HalfOpenRetryDelay is the least delay a caller rejected by a saturated half-open
	// circuit is told to wait. 0 means one second. Such a caller is told to come back
	// when a probe slot may free up (a lease ends, or a failed probe lets the next one
	// in), and not before this delay; after a missed deadline not before a tenth of
	// BreakDuration instead (missed.go).
	HalfOpenRetryDelay time.Duration
	// MaxBreakDuration, when greater than BreakDuration, doubles the break after each
	// consecutive failed probe, up to this value. Probes that missed their deadlines
	// (Permit.CompleteMissed) do not count toward the doubling.
	MaxBreakDuration time.Duration
	// Jitter spreads every break duration by up to plus or minus this fraction
	// (0 to 0.5), so that replicas do not probe in lockstep.
	Jitter float64
	// MaxInFlight, when positive, bounds the admitted calls not yet completed, in
	// every state. Acquire over the bound fails at once with ErrSaturated.
	MaxInFlight int
	// Scope says who shares the circuit. The zero value is LocalProcess.
	Scope Scope
	// Mode says what happens to a call the circuit would refuse. The zero value is
	// Enforce.
	Mode Mode

	// RampDuration, when positive, paces recovery: after the circuit closes from
	// half-open it admits only a share of calls, rising from RampFloor to all of them
	// over this time (Snapshot.RampShare), and when MaxInFlight is set its in-flight bound
	// rises on the same schedule. A call the ramp turns away gets an *OpenError that
	// has Ramping set. 0 closes straight to full traffic. At least 1ms.
	RampDuration time.Duration
	// RampFloor is the share of calls admitted the moment the circuit closes, within
	// [0, 1]. 0 means 0.1. Applies only with RampDuration.
	RampFloor float64
	// RampAggression shapes the ramp as in Envoy's slow start: the share grows as
	// (elapsed/RampDuration)^(1/RampAggression), so values above 1 open up faster at
	// first and values below 1 hold back longer. 0 means 1 (linear). Applies only
	// with RampDuration.
	RampAggression float64

	// Disabled says that a circuit which never opens is meant: FailureThreshold must
	// then be 0 (MaxInFlight still applies, which makes the circuit a pure bulkhead).
	// Behaviour is the same as without it; the registry asks for it so that a
	// forgotten FailureThreshold is an error, not a circuit that protects nothing.
	Disabled bool
}

// PolicyError names the Policy field that is wrong and why.
type PolicyError struct {
	Field  string // the Policy field, e.g. "BreakDuration"
	Reason string // what is wrong with it
}

// Error reports the field and the reason.
func (e *PolicyError) Error() string {
	return "breaker: invalid policy: " + e.Field + " " + e.Reason
}

// minFailureWindow keeps every window bucket at least 100µs wide.
const minFailureWindow = time.Millisecond

// minRampDuration keeps the ramp's retry slots (RampDuration/128) wider than the
// clock's resolution.
const minRampDuration = time.Millisecond

// maxPolicyDuration bounds every duration of a Policy. A circuit that should stay
// open longer is an operator's hold (ForceOpen); the bound also keeps every deadline
// the circuit computes (a doubled, jittered break added to the time since its start)
// far from overflowing, which would let calls through at once.
const maxPolicyDuration = 24 * time.Hour

// Validate reports the first field whose value is out of range, as a *PolicyError.
// It checks each field's own range first (counts not negative, durations within
// [0, 24h], ratios within their interval and not NaN), then the rules that tie
// fields together.
func (p Policy) Validate() error {
	for _, check := range [...]func(Policy) *PolicyError{Policy.checkCounts, Policy.checkDurations, Policy.checkRatios, Policy.checkRelations, Policy.checkRamp} {
		if err := check(p); err != nil {
			return err
		}
	}
	return nil
}

// fieldRule is one rule of Validate: when broken, field is wrong for reason.
type fieldRule struct {
	broken bool
	field  string
	reason string
}

// firstBroken returns the error of the first broken rule, or nil.
func firstBroken(rules []fieldRule) *PolicyError {
	for _, r := range rules {
		if r.broken {
			return &PolicyError{Field: r.field, Reason: r.reason}
		}
	}
	return nil
}

func (p Policy) checkCounts() *PolicyError {
	for _, f := range [...]struct {
		field string
		v     int
	}{
		{"FailureThreshold", p.FailureThreshold}, {"MinimumCalls", p.MinimumCalls},
		{"HalfOpenMaxProbes", p.HalfOpenMaxProbes}, {"SuccessesToClose", p.SuccessesToClose},
		{"MaxInFlight", p.MaxInFlight},
	} {
		if f.v < 0 {
			return &PolicyError{Field: f.field, Reason: fmt.Sprintf("must not be negative (got %d)", f.v)}
		}
	}
	return nil
}

func (p Policy) checkDurations() *PolicyError {
	for _, f := range [...]struct {
		field string
		v     time.Duration
	}{
		{"BreakDuration", p.BreakDuration}, {"FailureWindow", p.FailureWindow},
		{"SlowCallDuration", p.SlowCallDuration}, {"ProbeLease", p.ProbeLease},
		{"HalfOpenRetryDelay", p.HalfOpenRetryDelay}, {"MaxBreakDuration", p.MaxBreakDuration},
		{"RampDuration", p.RampDuration},
	} {
		switch {
		case f.v < 0:
			return &PolicyError{Field: f.field, Reason: fmt.Sprintf("must not be negative (got %v)", f.v)}
		case f.v > maxPolicyDuration:
			return &PolicyError{Field: f.field, Reason: fmt.Sprintf("must be at most %v (got %v); hold a circuit open longer with ForceOpen", maxPolicyDuration, f.v)}
		}
	}
	return nil
}

func (p Policy) checkRatios() *PolicyError {
	for _, f := range [...]struct {
		field string
		v     float64
		max   float64
	}{
		{"FailureRatio", p.FailureRatio, 1}, {"SlowCallRatio", p.SlowCallRatio, 1},
		{"Jitter", p.Jitter, 0.5}, {"RampFloor", p.RampFloor, 1},
		{"RampAggression", p.RampAggression, math.MaxFloat64},
	} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > f.max {
			if f.max == math.MaxFloat64 {
				return &PolicyError{Field: f.field, Reason: fmt.Sprintf("must be a positive number, or 0 for linear (got %v)", f.v)}
			}
			return &PolicyError{Field: f.field, Reason: fmt.Sprintf("must be within [0, %v] (got %v)", f.max, f.v)}
		}
	}
	return nil
}

// checkRelations checks the rules between fields; each field is within its own
// range already.
func (p Policy) checkRelations() *PolicyError {
	windowed := p.FailureWindow > 0
	return firstBroken([]fieldRule{
		{p.FailureThreshold > 0 && p.BreakDuration == 0, "BreakDuration", "must be positive when FailureThreshold is set"},
		{windowed && p.FailureWindow < minFailureWindow, "FailureWindow",
			fmt.Sprintf("must be at least %v (got %v)", minFailureWindow, p.FailureWindow)},
		{!windowed && p.MinimumCalls > 0, "MinimumCalls", "applies only in window mode; set FailureWindow"},
		{!windowed && p.FailureRatio > 0, "FailureRatio", "applies only in window mode; set FailureWindow"},
		{p.SlowCallRatio > 0 && (p.SlowCallDuration == 0 || !windowed), "SlowCallRatio",
			"applies only in window mode with SlowCallDuration; set both"},
		{p.MaxBreakDuration > 0 && p.MaxBreakDuration < p.BreakDuration, "MaxBreakDuration",
			fmt.Sprintf("must not be below BreakDuration (%v < %v)", p.MaxBreakDuration, p.BreakDuration)},
		{p.Scope > SingleHost, "Scope", fmt.Sprintf("is not a known scope (got %d)", p.Scope)},
		{p.Mode > FailOpen, "Mode", fmt.Sprintf("is not a known mode (got %d)", p.Mode)},
		{p.Disabled && p.FailureThreshold > 0, "Disabled",
			fmt.Sprintf("contradicts FailureThreshold %d; set one of them", p.FailureThreshold)},
	})
}

func (p Policy) checkRamp() *PolicyError {
	return firstBroken([]fieldRule{
		{p.RampDuration > 0 && p.RampDuration < minRampDuration, "RampDuration",
			fmt.Sprintf("must be at least %v (got %v)", minRampDuration, p.RampDuration)},
		{p.RampDuration == 0 && p.RampFloor != 0, "RampFloor", "applies only with RampDuration; set it"},
		{p.RampDuration == 0 && p.RampAggression != 0, "RampAggression", "applies only with RampDuration; set it"},
	})
}

// normalized returns the policy with every "0 means ..." default written out, so two
// policies that behave alike compare equal (backend.Normalize).
func (p Policy) normalized() Policy {
	if p.HalfOpenMaxProbes == 0 {
		p.HalfOpenMaxProbes = 1
	}
	if p.SuccessesToClose == 0 {
		p.SuccessesToClose = 1
	}
	if p.ProbeLease == 0 {
		p.ProbeLease = p.BreakDuration
	}
	if p.HalfOpenRetryDelay == 0 {
		p.HalfOpenRetryDelay = time.Second
	}
	if p.MaxBreakDuration <= p.BreakDuration {
		p.MaxBreakDuration = p.BreakDuration
	}
	if p.RampDuration > 0 && p.RampFloor == 0 {
		p.RampFloor = 0.1
	}
	if p.RampDuration > 0 && p.RampAggression == 0 {
		p.RampAggression = 1
	}
	return p
}

// rampShare returns the share of calls, in [RampFloor, 1], that a circuit admits a
// time since after it closed from half-open:
// max(RampFloor, (since/RampDuration)^(1/RampAggression)), and 1 once the ramp is over
// or when the policy has none. Backends that keep state elsewhere use it
// (backend.RampShare) so that every scope ramps alike.
func (p Policy) rampShare(since time.Duration) float64 {
	if p.RampDuration <= 0 || since >= p.RampDuration {
		return 1
	}
	f := float64(max(since, 0)) / float64(p.RampDuration)
	if a := p.RampAggression; a != 0 && a != 1 {
		f = math.Pow(f, 1/a)
	}
	floor := p.RampFloor
	if floor == 0 {
		floor = 0.1
	}
	return max(f, floor)
}

// breakAfter returns how long a circuit stays open after failedProbes consecutive
// failed probes (0 when it opens from closed): BreakDuration doubled per failed probe
// up to MaxBreakDuration, then spread by Jitter using random, a source of numbers in
// [0, 1) called only when Jitter is set. Backends that keep state elsewhere use it
// (backend.BreakAfter) so that every scope opens for the same time.
func (p Policy) breakAfter(failedProbes int, random func() float64) time.Duration {
	d, limit := int64(p.BreakDuration), int64(max(p.MaxBreakDuration, p.BreakDuration))
	for range failedProbes {
		if d > limit/2 { // 2d > limit: doubling would pass the maximum
			d = limit
			break
		}
		d *= 2
	}
	if p.Jitter > 0 {
		d += int64(float64(d) * p.Jitter * (2*random() - 1))
	}
	return time.Duration(max(d, 1))
}
