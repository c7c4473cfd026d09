package breaker

import (
	"errors"
	"time"
)

var (
	// ErrOpen is matched (errors.Is) by every rejection of an open or saturated
	// half-open circuit, and of a closed circuit ramping up after recovery. The
	// concrete error is an [*OpenError].
	ErrOpen = errors.New("breaker: circuit open")
	// ErrUnavailable is returned by a shared circuit whose state store cannot be
	// reached and whose last known state is too old to trust.
	ErrUnavailable = errors.New("breaker: circuit state unavailable")
	// ErrSaturated is returned by Acquire when Policy.MaxInFlight calls are already in
	// flight. It does not wait.
	ErrSaturated = errors.New("breaker: too many calls in flight")
)

// OpenError is the rejection of a call by an open circuit, by a half-open circuit
// whose probe slots are taken, or by a closed circuit ramping up after recovery.
// errors.Is(err, ErrOpen) holds for it; Ramping tells the last apart.
type OpenError struct {
	// Identity names the circuit.
	Identity string
	// Scope is the scope of the circuit that rejected the call.
	Scope Scope
	// NotBefore is the earliest time a new call can be admitted: the open deadline, or
	// for a saturated half-open circuit the time worth trying again.
	NotBefore time.Time
	// Ramping says that the circuit is closed and turned the call away to pace its
	// recovery (Policy.RampDuration); NotBefore then spreads callers over the ramp.
	Ramping bool

	msg string // built once per open generation so a rejection allocates nothing
}

// newOpenError returns the rejection of a circuit named identity until notBefore, with
// its message built once. Circuits build one per open generation and return it to
// every rejected caller, so that a rejection allocates nothing (backends through
// backend.NewOpenError).
func newOpenError(identity string, scope Scope, notBefore time.Time) *OpenError {
	return &OpenError{
		Identity:  identity,
		Scope:     scope,
		NotBefore: notBefore,
		msg:       rejectMessage(identity, notBefore, false),
	}
}

func newRampError(identity string, scope Scope, notBefore time.Time) *OpenError {
	return &OpenError{
		Identity:  identity,
		Scope:     scope,
		NotBefore: notBefore,
		Ramping:   true,
		msg:       rejectMessage(identity, notBefore, true),
	}
}

func rejectMessage(identity string, notBefore time.Time, ramping bool) string {
	what := "breaker: circuit open: "
	if ramping {
		what = "breaker: circuit ramping up: "
	}
	return what + identity + " (retry after " + notBefore.UTC().Format(time.RFC3339Nano) + ")"
}

// Error reports the circuit and when to come back.
func (e *OpenError) Error() string {
	if e.msg == "" {
		return rejectMessage(e.Identity, e.NotBefore, e.Ramping)
	}
	return e.msg
}

// Is reports whether target is ErrOpen.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }
