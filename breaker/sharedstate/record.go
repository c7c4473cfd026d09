package sharedstate

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// MaxLeases bounds the leases a record may hold, so that a corrupted record cannot
// make a replica walk a huge list on every probe decision.
const MaxLeases = 1024

// MaxRecordSize bounds the encoded size of one record that a driver decodes: a record
// of MaxLeases leases with long owner names is well under it. A driver checks it before
// it decodes anything, so that a record inflated by someone with write access to the
// store costs a replica no more than this to refuse. The file store's
// bound is smaller (64 KiB); DynamoDB bounds items at 400 KB itself.
const MaxRecordSize = 256 << 10

// maxCounter bounds Version and Generation (see Record.Check).
const maxCounter = 1 << 63

// RecordError reports a stored record that the engine refuses: a value out of range
// or fields that contradict each other. A circuit whose record is corrupt admits
// nothing until the record is repaired or removed. errors.Is(err, ErrCorrupt) holds.
type RecordError struct {
	Identity string
	Field    string // the Record field, e.g. "OpenUntil" or "Leases[2].ID"
	Reason   string
}

// Error names the circuit, the field and the problem.
func (e *RecordError) Error() string {
	return "sharedstate: corrupt record of circuit " + strconv.Quote(e.Identity) + ": " + e.Field + " " + e.Reason
}

// Is reports whether target is ErrCorrupt.
func (e *RecordError) Is(target error) bool { return target == ErrCorrupt }

// Check reports the first field of r that no engine could have written, as a
// *RecordError. It does not need the policy; the engine also checks the fingerprint.
func (r *Record) Check(identity string) error {
	for _, check := range [...]func(*Record) (field, reason string){
		(*Record).checkCounters, (*Record).checkState, (*Record).checkHealth, (*Record).checkOverride, (*Record).checkLeaseIDs,
	} {
		if field, reason := check(r); field != "" {
			return &RecordError{Identity: identity, Field: field, Reason: reason}
		}
	}
	return nil
}

// checkCounters checks the version, generation and fingerprint; each check* method
// returns the field that is wrong and why, or "".
func (r *Record) checkCounters() (field, reason string) {
	switch {
	case r.Version == 0:
		return "Version", "must be at least 1"
	case r.Version >= maxCounter || r.Generation >= maxCounter:
		// Both start at a Unix time in nanoseconds (below 2^63 until 2262) and advance
		// by one per write, so a value this high was not written by an engine, and
		// advancing it would wrap to 0: a record the engine would then refuse.
		return "Version", fmt.Sprintf("and Generation must be below 2^63, got %d and %d", r.Version, r.Generation)
	case r.Fingerprint == "":
		return "Fingerprint", "must not be empty"
	case r.Generation == 0:
		return "Generation", "must be at least 1"
	}
	return "", ""
}

// checkState checks the state and what it requires: counts, the open deadline and
// the number of leases.
func (r *Record) checkState() (field, reason string) {
	switch {
	case r.State < breaker.Closed || r.State > breaker.HalfOpen:
		return "State", fmt.Sprintf("is not a known state (%d)", r.State)
	case r.Failures < 0 || r.FailedProbes < 0 || r.Successes < 0:
		return "Failures", "and the probe counts must not be negative"
	case r.State == breaker.Open && r.OpenUntil <= 0:
		return "OpenUntil", "must be set while the circuit is open"
	case r.State != breaker.HalfOpen && len(r.Leases) > 0:
		return "Leases", fmt.Sprintf("must be empty while the circuit is %v", r.State)
	case len(r.Leases) > MaxLeases:
		return "Leases", fmt.Sprintf("holds %d leases, more than %d", len(r.Leases), MaxLeases)
	}
	return "", ""
}

// checkHealth checks what on-call people read: the outage's start and the last error.
func (r *Record) checkHealth() (field, reason string) {
	switch {
	case r.UnhealthySince < 0 || r.LastErrorAt < 0:
		return "UnhealthySince", "and LastErrorAt must not be negative"
	case len(r.LastError) > backend.MaxErrorText:
		return "LastError", fmt.Sprintf("holds %d bytes, more than %d", len(r.LastError), backend.MaxErrorText)
	}
	return "", ""
}

// checkOverride checks an operator's hold against the state it holds.
func (r *Record) checkOverride() (field, reason string) {
	switch {
	case r.Override > breaker.ForcedClosed:
		return "Override", fmt.Sprintf("is not a known override (%d)", r.Override)
	case r.Override != breaker.NoOverride && r.OverrideUntil <= 0:
		return "OverrideUntil", "must be set with an override"
	case r.Override == breaker.ForcedOpen && r.State != breaker.Open,
		r.Override == breaker.ForcedClosed && r.State != breaker.Closed:
		return "Override", fmt.Sprintf("%v contradicts state %v", r.Override, r.State)
	}
	return "", ""
}

// checkLeaseIDs checks that every lease has an ID of its own.
func (r *Record) checkLeaseIDs() (field, reason string) {
	seen := make(map[uint64]bool, len(r.Leases))
	for i, l := range r.Leases {
		if l.ID == 0 || seen[l.ID] {
			return "Leases[" + strconv.Itoa(i) + "].ID", fmt.Sprintf("must be non-zero and unique, got %d", l.ID)
		}
		seen[l.ID] = true
	}
	return "", ""
}

// RecordFields returns the names of Record's fields. Driver tests use it to check that
// a driver stores every one (see circuittest.TestDriver), so a field added to Record
// cannot be silently dropped by a store.
func RecordFields() []string {
	t := reflect.TypeFor[Record]()
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		names = append(names, t.Field(i).Name)
	}
	return names
}
