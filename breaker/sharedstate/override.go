package sharedstate

import (
	"errors"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// hold is an operator's change of a record at wall time now (Unix nanoseconds). It
// reports whether there is anything to write. Circuit and Operator apply the same
// holds, so an override made either way is the same record.
type hold func(r *Record, now int64) bool

// forceOpen opens the circuit in a new generation until the given time, as an
// override: outcomes change nothing until it ends, and then a probe is admitted.
func forceOpen(until time.Time) hold {
	return func(r *Record, now int64) bool {
		toOpen(r, now, until.UnixNano(), breaker.ReasonForcedOpen)
		r.Override, r.OverrideUntil = breaker.ForcedOpen, max(until.UnixNano(), 1)
		return true
	}
}

// forceClose closes the circuit in a new generation until the given time, as an
// override: calls are admitted and outcomes change nothing until it ends.
func forceClose(until time.Time) hold {
	return func(r *Record, now int64) bool {
		toClosed(r, now, breaker.ReasonForcedClosed)
		r.Override, r.OverrideUntil = breaker.ForcedClosed, max(until.UnixNano(), 1)
		return true
	}
}

// clearOverride ends an override as if its deadline had passed: a ForceOpen turns
// half-open, a ForceClose closed with no failure evidence. Without one it writes
// nothing.
func clearOverride(r *Record, now int64) bool {
	switch r.Override {
	case breaker.ForcedOpen:
		toHalfOpen(r, now, breaker.ReasonOverrideCleared)
	case breaker.ForcedClosed:
		toClosed(r, now, breaker.ReasonOverrideCleared)
	default:
		return false
	}
	return true
}

// overrideRecord reads the record with load, applies h at the time now tells, and
// stores the result with replace, conditional on the version read; a lost write
// reads again. An operator's action always reads first: it must act on the state as
// it is, not on a snapshot. It returns the record as it stands afterwards (the one
// read when h wrote nothing). Errors of load and replace are returned as they are;
// writers that kept winning give errContention.
func overrideRecord(load func() (Record, error), replace func(prev, next Record) error, now func() int64, h hold) (Record, error) {
	for range maxAttempts {
		r, err := load()
		if err != nil {
			return Record{}, err
		}
		next := r
		if !h(&next, now()) {
			return r, nil
		}
		next.Version = r.Version + 1
		err = replace(r, next)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, ErrConflict) {
			return Record{}, err
		}
	}
	return Record{}, errContention
}
