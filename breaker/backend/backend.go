package backend

import (
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/internal/link"
	"github.com/brokerguard/brokerguard/internal/safetext"
)

// PermitInfo is what a backend gets back when its permit completes: the Generation,
// Probe and Lease given to NewPermit.
type PermitInfo = link.PermitInfo

// Completer receives the outcome of a permit made by NewPermit. Backends that keep a
// circuit's state elsewhere (another process, a table) implement it.
type Completer interface {
	// CompletePermit is called once per permit, on its first Complete, and returns
	// what Complete returns: whether the outcome was taken into account.
	CompletePermit(p PermitInfo, o breaker.Outcome) bool
}

// ErrorCompleter is an optional capability of a Completer (found by type
// assertion): it is given the error of a failed call with its outcome, by
// Permit.CompleteWith and Permit.CompleteMissed, so that the circuit can show it in
// its snapshot.
type ErrorCompleter interface {
	Completer
	// CompletePermitWith is CompletePermit with the call's error (non-nil, and only
	// for a Failure).
	CompletePermitWith(p PermitInfo, o breaker.Outcome, err error) bool
}

// What package breaker lends (see package link); asserted once, at initialization.
var (
	newPermit    = link.NewPermit.(func(any, link.PermitInfo) breaker.Permit)
	newOpenError = link.NewOpenError.(func(string, breaker.Scope, time.Time) *breaker.OpenError)
	newRamp      = link.NewRamp.(func(string, breaker.Policy, time.Time, uint64) (
		func(time.Duration) (float64, *breaker.OpenError), func(time.Duration) *breaker.OpenError, time.Time))
	normalize  = link.Normalize.(func(breaker.Policy) breaker.Policy)
	rampShare  = link.RampShare.(func(breaker.Policy, time.Duration) float64)
	breakAfter = link.BreakAfter.(func(breaker.Policy, int, func() float64) time.Duration)
)

// NewPermit makes a permit for a backend's circuit. Its first Complete calls
// c.CompletePermit with info; later completions return false without calling it.
func NewPermit(c Completer, info PermitInfo) breaker.Permit { return newPermit(c, info) }

// NewOpenError returns the rejection of a circuit named identity until notBefore,
// with its message built once. Backends build one per open generation and return it
// to every rejected caller, so that a rejection allocates nothing.
func NewOpenError(identity string, scope breaker.Scope, notBefore time.Time) *breaker.OpenError {
	return newOpenError(identity, scope, notBefore)
}

// Normalize returns p with every "0 means ..." default written out, so two policies
// that behave alike compare equal; breaker.Breaker.Policy returns its policy so.
func Normalize(p breaker.Policy) breaker.Policy { return normalize(p) }

// RampShare returns the share of calls, in [RampFloor, 1], that a circuit under p
// admits a time since after it closed from half-open:
// max(RampFloor, (since/RampDuration)^(1/RampAggression)), and 1 once the ramp is
// over or when the policy has none, as the local breaker does.
func RampShare(p breaker.Policy, since time.Duration) float64 { return rampShare(p, since) }

// BreakAfter returns how long a circuit under p stays open after failedProbes
// consecutive failed probes (0 when it opens from closed): BreakDuration doubled per
// failed probe up to MaxBreakDuration, then spread by Jitter using random, a source
// of numbers in [0, 1) called only when Jitter is set; as the local breaker does.
func BreakAfter(p breaker.Policy, failedProbes int, random func() float64) time.Duration {
	return breakAfter(p, failedProbes, random)
}

// Ramp paces the calls of a circuit that has just closed from half-open, as the
// local breaker's does (Policy.RampDuration): a backend makes one from the close
// time it stored, so that every process ramps on the same schedule. It decides each
// call with no lock and no clock of its own. It is safe for concurrent use.
type Ramp struct {
	admit  func(time.Duration) (float64, *breaker.OpenError)
	refuse func(time.Duration) *breaker.OpenError
	until  time.Time
}

// NewRamp returns the ramp of a circuit named identity that closed at closedAt under
// policy p, or nil when p has no ramp. seed picks where its sequence of decisions
// starts: give each process its own.
func NewRamp(identity string, p breaker.Policy, closedAt time.Time, seed uint64) *Ramp {
	admit, refuse, until := newRamp(identity, p, closedAt, seed)
	if admit == nil {
		return nil
	}
	return &Ramp{admit: admit, refuse: refuse, until: until}
}

// Until returns when the ramp ends and every call is admitted again.
func (r *Ramp) Until() time.Time { return r.until }

// Admit decides one call made a time since after the close. It returns the share of
// calls the ramp admits now (RampShare) and, when it turns this call away, the
// refusal: an *OpenError matching ErrOpen, with Ramping set, whose NotBefore is
// spread evenly over the next eighth of the ramp, so that the callers it turns away
// come back at different times.
func (r *Ramp) Admit(since time.Duration) (share float64, refusal *breaker.OpenError) {
	return r.admit(since)
}

// Refuse returns a refusal for a call made a time since after the close that the
// ramp turns away for a reason of the caller's own (an in-flight bound that rises
// with the share), spread like Admit's.
func (r *Ramp) Refuse(since time.Duration) *breaker.OpenError { return r.refuse(since) }

// MaxErrorText bounds Snapshot.LastError, in bytes: enough for a broker's error and
// the address it came from, not for a payload an error happened to quote.
const MaxErrorText = 512

// ErrorText is what a circuit keeps of a failure's error for Snapshot.LastError: its
// text with credentials redacted (a URL's user information, password=..., tokens),
// control characters escaped and at most MaxErrorText bytes, as the local breaker
// keeps it, so that every circuit shows the same thing.
func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return safetext.ErrorText(err.Error(), MaxErrorText)
}
