package breaker

import (
	"errors"
	"time"
)

var (
	// ErrOpen is matched (errors.Is) by every rejection of an open or saturated
	// half-open circuit. The concrete error is an [*OpenError].
	ErrOpen = errors.New("breaker: circuit open")
	// ErrUnavailable is returned by a shared circuit whose state store cannot be
	// reached and whose last known state is too old to trust.
	ErrUnavailable = errors.New("breaker: circuit state unavailable")
	// ErrSaturated is returned by Acquire when Policy.MaxInFlight calls are already in
	// flight. It does not wait.
	ErrSaturated = errors.New("breaker: too many calls in flight")
)

// OpenError is the rejection of a call by an open circuit, or by a half-open circuit
// whose probe slots are taken. errors.Is(err, ErrOpen) holds for it.
type OpenError struct {
	// Identity names the circuit.
	Identity string
	// Scope is the scope of the circuit that rejected the call.
	Scope Scope
	// NotBefore is the earliest time a new call can be admitted: the open deadline, or
	// for a saturated half-open circuit the time worth trying again.
	NotBefore time.Time

	msg string // built once per open generation so a rejection allocates nothing
}

// NewOpenError returns the rejection of a circuit named identity until notBefore, with
// its message built once. Backends build one per open generation and return it to
// every rejected caller, so that a rejection allocates nothing.
func NewOpenError(identity string, scope Scope, notBefore time.Time) *OpenError {
	return &OpenError{
		Identity:  identity,
		Scope:     scope,
		NotBefore: notBefore,
		msg:       "breaker: circuit open: " + identity + " (retry after " + notBefore.UTC().Format(time.RFC3339Nano) + ")",
	}
}

// Error reports the circuit and when to come back.
func (e *OpenError) Error() string {
	if e.msg == "" {
		return NewOpenError(e.Identity, e.Scope, e.NotBefore).msg
	}
	return e.msg
}

// Is reports whether target is ErrOpen.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }
