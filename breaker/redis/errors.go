package redisstate

import (
	"errors"
	"strconv"
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

// Is reports whether target is ErrCorruptRecord.
func (e *RecordError) Is(target error) bool { return target == ErrCorruptRecord }
