package sharedstate

import (
	"context"
	"errors"

	"github.com/brokerguard/brokerguard/breaker"
)

// Record is the whole state of one shared circuit, as a Driver stores it. The engine
// decides every value; a driver only stores and returns records, and checks the
// conditions its methods name. Times are Unix nanoseconds of the writers' clocks.
//
// The record grows: fields may be added (a ramp after closing, for one). A field's
// zero value always means "absent", so a record written before the field existed
// reads correctly. A driver must store every field; RecordFields lists them, and
// circuittest.TestDriver fails for a driver that drops one.
type Record struct {
	// Version is advanced by one on every write; Driver.Replace compares it. 0 only
	// for a record not stored yet. The first stored version is the creation time, so
	// that a record deleted and created again never repeats a version.
	Version uint64 `json:"version"`
	// Fingerprint is the digest of the policy fields that must agree across replicas
	// (see Fingerprint); Policy is the same fields in words, so that a mismatch can
	// name the field that differs.
	Fingerprint string `json:"fingerprint"`
	Policy      string `json:"policy,omitempty"`

	State      breaker.State `json:"state"`
	Generation uint64        `json:"generation"` // advanced by every transition
	// Failures is the shared consecutive-failure count while closed; the count that
	// opened the circuit otherwise.
	Failures     int64   `json:"failures"`
	OpenUntil    int64   `json:"open_until,omitempty"`    // open: when a probe may be admitted
	FailedProbes int64   `json:"failed_probes,omitempty"` // consecutive failed probes since the circuit last closed
	Successes    int64   `json:"successes,omitempty"`     // half-open: probe successes in this generation
	Leases       []Lease `json:"leases,omitempty"`        // half-open: probes in flight

	// Override is an operator's hold (ForceOpen, ForceClose) and OverrideUntil
	// when it ends.
	Override      breaker.Override `json:"override,omitempty"`
	OverrideUntil int64            `json:"override_until,omitempty"`

	// Reason and Since describe the transition that started this generation, so that
	// a replica that learns of it by reading reports it to its observers as it was.
	Reason string `json:"reason,omitempty"`
	Since  int64  `json:"since,omitempty"`

	// LastError is the error text of the failure that last opened the circuit (or
	// of a failed probe), as backend.ErrorText keeps it, and LastErrorAt when it was
	// written. UnhealthySince is when the current outage began: the first opening
	// since the circuit was last closed; probe cycles keep it, closing clears it.
	LastError      string `json:"last_error,omitempty"`
	LastErrorAt    int64  `json:"last_error_at,omitempty"`
	UnhealthySince int64  `json:"unhealthy_since,omitempty"`
}

// Lease is one half-open probe in flight. A lease whose Expires has passed frees its
// slot for any replica, and its holder's outcome no longer counts.
type Lease struct {
	ID      uint64 `json:"id"`      // random, non-zero, unique in the record
	Owner   string `json:"owner"`   // the replica that took it (for people, not decisions)
	Expires int64  `json:"expires"` // Unix nanoseconds
}

// Driver keeps the records of a store (a table, a directory, a Redis database), one
// per circuit identity. The engine makes every decision; a driver reads a record and
// replaces it only if it has not changed since it was read. Methods are called
// concurrently, each bounded by ctx (the engine sets the I/O timeout); a driver must
// return when ctx ends.
//
// Errors: ErrNotFound and ErrConflict mean exactly what the methods say, and that
// nothing was written. Any other error from a write leaves it unknown whether the
// write took effect (the "maybe delivered" rule of database/sql/driver.ErrBadConn);
// the engine reads the record again to find out rather than assume either way (a
// probe lease whose write answer was lost is found, and used or given back, that
// way). Leases, overrides and transitions are all written with Replace; a driver
// needs no notion of them. An
// error that says the store answered with something unusable (a corrupt record)
// should match breaker.ErrUnavailable or describe itself; the engine wraps it for
// the caller and fails closed.
type Driver interface {
	// Load returns the record of id, or ErrNotFound when there is none. It need not
	// be strict about field values: the engine validates what it reads.
	Load(ctx context.Context, id string) (Record, error)
	// Replace stores next as the record of id if the stored record's Version equals
	// expect, or, when expect is 0, if id has no record. next.Version is already
	// advanced past expect by the engine. When the condition does not hold it
	// returns ErrConflict and writes nothing.
	Replace(ctx context.Context, id string, expect uint64, next Record) error
}

// Counter is an optional capability of a Driver (found by type assertion): counting
// closed-state evidence in one request, without reading the record first, so that a
// fleet in which many replicas fail at once does not turn every failure into a
// read-compare-write race. DynamoDB does it with a conditional UpdateItem (ADD),
// Redis with a script. Both methods advance Version by one and return the record as
// written; when the condition does not hold they return ErrConflict and write
// nothing.
//
// The limit makes counting safe: the failure that reaches the threshold leaves the
// record closed with Failures == Limit ("tripped"), and from then on neither method
// applies, so no success can wipe out a reached threshold before some replica writes
// OPEN with Replace.
type Counter interface {
	// AddFailure adds one to Failures if the record of id matches c and Failures < c.Limit.
	AddFailure(ctx context.Context, id string, c Closed) (Record, error)
	// ResetFailures sets Failures to 0 if the record of id matches c and
	// 0 < Failures < c.Limit.
	ResetFailures(ctx context.Context, id string, c Closed) (Record, error)
}

// Closed is the condition of a Counter update: the record is closed in Generation,
// under Fingerprint, with no override.
type Closed struct {
	Generation  uint64
	Fingerprint string
	Limit       int64 // the policy's FailureThreshold
}

// Matches reports whether r satisfies the condition c (other than the Failures bound
// each Counter method adds), for drivers that check it in Go rather than in the store.
func (c Closed) Matches(r Record) bool {
	return r.State == breaker.Closed && r.Generation == c.Generation && r.Fingerprint == c.Fingerprint &&
		r.Override == breaker.NoOverride
}

// Errors with a fixed meaning in the Driver contract.
var (
	// ErrNotFound is returned by Load when the identity has no record.
	ErrNotFound = errors.New("sharedstate: no record")
	// ErrConflict is returned by a conditional write whose condition did not hold; it
	// guarantees that nothing was written.
	ErrConflict = errors.New("sharedstate: the record changed; nothing was written")
)
