package redisstate

import (
	"errors"
	"strconv"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// ErrCorruptRecord is matched (errors.Is) by every *RecordError.
var ErrCorruptRecord = errors.New("redisstate: corrupt circuit record")

// RecordError reports a circuit's key whose fields cannot be read as a record: one is
// missing, malformed, or disagrees with the record. A circuit whose key is corrupt
// refuses calls (fails closed) until the key is repaired or deleted; deleting it resets
// the circuit to closed.
type RecordError struct {
	Key    string // the Redis key
	Field  string // the hash field, e.g. "version"
	Reason string // what is wrong with it
}

// Error names the key, the field and the problem.
func (e *RecordError) Error() string {
	return "redisstate: corrupt circuit record at key " + strconv.Quote(e.Key) + ": field " + e.Field + " " + e.Reason
}

// Is reports whether target is ErrCorruptRecord or sharedstate.ErrCorrupt (which the
// engine's own checks of a record match).
func (e *RecordError) Is(target error) bool {
	return target == ErrCorruptRecord || target == sharedstate.ErrCorrupt
}

// UnavailableError is how a shared circuit refuses a call it cannot protect: Redis
// could not be reached (or answered with a corrupt record, or one written under
// another policy) and the circuit's last known state is too old to trust.
// errors.Is(err, breaker.ErrUnavailable) holds for it, and errors.As reaches the cause
// (a *RecordError, a *sharedstate.RecordError, a *sharedstate.PolicyMismatchError or
// the client's error).
type UnavailableError struct {
	Identity string // the circuit's identity
	Key      string // the Redis key holding its record
	Err      error  // why the state could not be used
}

// Error names the circuit, the key and the cause.
func (e *UnavailableError) Error() string {
	return "redisstate: circuit " + strconv.Quote(e.Identity) + " (key " + strconv.Quote(e.Key) +
		"): state unavailable: " + e.Err.Error()
}

// Is reports whether target is breaker.ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == breaker.ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }
