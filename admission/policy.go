package admission

import (
	"fmt"
	"math"
	"time"
)

// Policy configures the admission control of one destination in one process. The
// zero Policy admits every call. A registry (package registry) keeps one controller
// per destination, local to the process: admission is never shared between replicas,
// each bounds the work it sends itself.
type Policy struct {
	// Limit is the adaptive concurrency limit (see LimitPolicy); the zero value turns
	// it off.
	Limit LimitPolicy
	// Throttle is the adaptive throttle (see ThrottlePolicy): it refuses calls in
	// proportion to the share the destination stopped accepting. The zero value turns
	// it off.
	Throttle ThrottlePolicy
}

// DefaultPolicy returns the admission control brokerguard recommends for broker
// publishers: an adaptive limit of up to 1,000 messages in flight per destination,
// contracting when latency passes twice its learned baseline or calls are dropped,
// with bulk work holding at most half of it; and the adaptive throttle of
// DefaultThrottlePolicy (K 3 over 1 s, from 20 calls sent), which sheds calls only
// while the destination accepts less than a third of them. Every default is written
// out.
func DefaultPolicy() Policy {
	return Policy{
		Limit:    LimitPolicy{Max: 1000, Min: 1, Tolerance: 2, BulkShare: 0.5, Window: 100 * time.Millisecond},
		Throttle: DefaultThrottlePolicy(),
	}
}

// Enabled reports whether the policy controls admission at all: the limit or the
// throttle is on.
func (p Policy) Enabled() bool { return p.Limit.Enabled() || p.Throttle.Enabled() }

// Validate reports the first field whose value is out of range, as a *PolicyError.
func (p Policy) Validate() error {
	if err := p.Limit.validate(); err != nil {
		return err
	}
	return p.Throttle.validate()
}

// LimitPolicy configures an adaptive concurrency limit (see Limiter): a bound on the
// messages in flight to a destination at once that learns the destination's healthy
// latency, contracts as latency rises or calls are dropped, and explores upward again
// when latency falls. The zero LimitPolicy turns the limit off.
//
// The limit counts messages, not calls: a call of a 100-message batch holds 100 of it,
// so a batch and a single publish are weighed by the work they give the broker. Calls
// over the limit are refused at once with a *LimitError carrying a NotBefore; nothing
// waits.
//
// Bulk calls (priority Bulk, what the outbox sends) yield first: they hold a budget
// of their own, at most BulkShare of Max, that grows while online calls are served
// well within their deadlines and halves when calls are dropped, so that a drain uses
// the capacity online calls leave and no more. Online calls are bounded by the limit
// and never wait for bulk work's messages.
type LimitPolicy struct {
	// Max is the most messages the limit lets be in flight at once. 0 turns the
	// limit off (and every other field must then be zero).
	Max int
	// Min is the least the limit contracts to. 0 means 1.
	Min int
	// Tolerance is how many times the learned baseline latency the recent latency may
	// reach before the limit contracts, at least 1. 0 means 2.
	Tolerance float64
	// BulkShare is the most of Max that bulk calls may hold while the destination is
	// healthy, within [0, 1]. 0 means 0.5.
	BulkShare float64
	// Window is the least time between two updates of the limit, at least 1ms. 0 means
	// 100ms.
	Window time.Duration
}

// Enabled reports whether the limit is on (Max > 0).
func (lp LimitPolicy) Enabled() bool { return lp.Max > 0 }

// normalized writes out the "0 means" defaults of an enabled limit.
func (lp LimitPolicy) normalized() LimitPolicy {
	if lp.Min == 0 {
		lp.Min = 1
	}
	if lp.Tolerance == 0 {
		lp.Tolerance = 2
	}
	if lp.BulkShare == 0 {
		lp.BulkShare = 0.5
	}
	if lp.Window == 0 {
		lp.Window = 100 * time.Millisecond
	}
	return lp
}

func (lp LimitPolicy) validate() error {
	bad := func(field, format string, args ...any) error {
		return &PolicyError{Field: "Limit." + field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case lp.Max < 0:
		return bad("Max", "must not be negative (got %d)", lp.Max)
	case lp.Max == 0 && lp != LimitPolicy{}:
		return bad("Max", "must be positive when another Limit field is set (0 turns the limit off)")
	case lp.Max == 0:
		return nil
	case lp.Min < 0:
		return bad("Min", "must not be negative (got %d)", lp.Min)
	case lp.Min > lp.Max:
		return bad("Min", "must not exceed Limit.Max (%d > %d)", lp.Min, lp.Max)
	case math.IsNaN(lp.Tolerance) || math.IsInf(lp.Tolerance, 0) || lp.Tolerance != 0 && lp.Tolerance < 1:
		return bad("Tolerance", "must be at least 1, or 0 for 2 (got %v)", lp.Tolerance)
	case math.IsNaN(lp.BulkShare) || lp.BulkShare < 0 || lp.BulkShare > 1:
		return bad("BulkShare", "must be within [0, 1] (got %v)", lp.BulkShare)
	case lp.Window < 0 || lp.Window > 0 && lp.Window < time.Millisecond:
		return bad("Window", "must be at least 1ms, or 0 for 100ms (got %v)", lp.Window)
	}
	return nil
}

// PolicyError names the Policy field that is wrong ("Limit.Max", "Throttle.K") and why.
type PolicyError struct {
	Field  string
	Reason string
}

// Error reports the field and the reason.
func (e *PolicyError) Error() string {
	return "admission: invalid policy: " + e.Field + " " + e.Reason
}
