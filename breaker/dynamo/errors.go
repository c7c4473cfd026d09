package dynamo

import (
	"errors"
	"strconv"

	"github.com/brokerguard/brokerguard/breaker"
)

// UnavailableError is how a shared circuit refuses a call it cannot protect: the table
// could not be reached (or answered with a corrupt item, or with a policy fingerprint
// other than ours) and the circuit's last known state is too old to trust.
// errors.Is(err, breaker.ErrUnavailable) holds for it, and errors.As reaches the cause
// (an *ItemError, a *FingerprintError or the SDK's error).
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

// ErrFingerprintMismatch is matched (errors.Is) by every *FingerprintError.
var ErrFingerprintMismatch = errors.New("dynamo: policy fingerprint mismatch")

// FingerprintError reports an item written under a policy other than this replica's:
// replicas sharing one circuit must run one policy, so the circuit refuses to use it.
type FingerprintError struct {
	Identity string // the circuit's identity
	Stored   string // the fingerprint in the item
	Ours     string // breaker.Policy.Fingerprint of this replica's policy
}

// Error names the identity and both fingerprints.
func (e *FingerprintError) Error() string {
	return "dynamo: circuit " + strconv.Quote(e.Identity) + " is stored with policy fingerprint " +
		e.Stored + " but this replica's policy has fingerprint " + e.Ours +
		"; replicas sharing a circuit must use the same policy"
}

// Is reports whether target is ErrFingerprintMismatch.
func (e *FingerprintError) Is(target error) bool { return target == ErrFingerprintMismatch }

// errContention is the cause when conditional writes kept losing to other replicas.
var errContention = errors.New("dynamo: the item kept changing under concurrent writers; try again")
