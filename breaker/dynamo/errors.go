package dynamo

import (
	"strconv"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// UnavailableError is how a shared circuit refuses a call it cannot protect: the table
// could not be reached (or answered with a corrupt item, or with a policy fingerprint
// other than ours) and the circuit's last known state is too old to trust.
// errors.Is(err, breaker.ErrUnavailable) holds for it, and errors.As reaches the cause
// (an *ItemError, a *sharedstate.RecordError, a *sharedstate.PolicyMismatchError or the
// SDK's error).
type UnavailableError struct {
	Identity string // the circuit's identity
	Table    string // the table holding its state
	Err      error  // why the state could not be used
}

// Error names the circuit, the table and the cause.
func (e *UnavailableError) Error() string {
	return "dynamo: circuit " + strconv.Quote(e.Identity) + " (table " + strconv.Quote(e.Table) +
		"): state unavailable: " + e.Err.Error()
}

// Is reports whether target is breaker.ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == breaker.ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// ErrFingerprintMismatch is matched (errors.Is) by the refusal of an item written
// under another policy: a *sharedstate.PolicyMismatchError, which names the fields
// that differ.
var ErrFingerprintMismatch = sharedstate.ErrPolicyMismatch
