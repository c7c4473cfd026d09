package sharedstate

import (
	"errors"
	"strconv"

	"github.com/brokerguard/brokerguard/breaker"
)

var (
	// ErrPolicyMismatch is matched by every *PolicyMismatchError.
	ErrPolicyMismatch = errors.New("sharedstate: policy mismatch")
	// ErrCorrupt is matched by every *RecordError.
	ErrCorrupt = errors.New("sharedstate: corrupt record")
	// errContention is the cause when conditional writes kept losing to other replicas.
	errContention = errors.New("sharedstate: the record kept changing under concurrent writers; try again")
)

// UnavailableError is how a shared circuit refuses a call it cannot protect: its
// store could not be reached, or answered with a corrupt record or another policy's,
// and the last known state is too old to trust. errors.Is(err, breaker.ErrUnavailable)
// holds, and errors.As reaches the cause. Backends may replace it with their own
// error (Config.Unavailable).
type UnavailableError struct {
	Identity string
	Err      error
}

// Error names the circuit and the cause.
func (e *UnavailableError) Error() string {
	return "sharedstate: circuit " + strconv.Quote(e.Identity) + ": state unavailable: " + e.Err.Error()
}

// Is reports whether target is breaker.ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == breaker.ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }
