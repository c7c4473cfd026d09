package outbox

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// Status is where a row is in its life. A row starts pending and ends published or
// dead; nothing is ever deleted by the dispatcher.
type Status string

// The statuses a row can have.
const (
	// StatusPending rows wait to be published once their visible_after has passed.
	StatusPending Status = "pending"
	// StatusPublished rows were accepted by the broker.
	StatusPublished Status = "published"
	// StatusDead rows will not be tried again: their attempts or their deferral
	// lifetime ran out, or their destination is invalid. LastError says which.
	StatusDead Status = "dead"
)

// ReasonDeferralExhausted is the LastError of a row that died because its
// destination's circuit stayed open longer than the MaxCircuitDeferral.
const ReasonDeferralExhausted = "circuit_deferral_exhausted"

// ErrUnknownStatus is matched (errors.Is) by the *UnknownStatusError a store returns
// when it reads a row whose status this version does not know.
var ErrUnknownStatus = errors.New("outbox: unknown row status")

// UnknownStatusError names a row whose status is none of the Status constants. A
// store returns it rather than skip the row.
type UnknownStatusError struct {
	ID     int64
	Status string
}

// Error names the row and the status.
func (e *UnknownStatusError) Error() string {
	return "outbox: row " + strconv.FormatInt(e.ID, 10) + " has unknown status " + strconv.Quote(e.Status)
}

// Is reports whether target is ErrUnknownStatus.
func (e *UnknownStatusError) Is(target error) bool { return target == ErrUnknownStatus }

// ParseStatus returns the status s names, or an *UnknownStatusError naming row id.
func ParseStatus(id int64, s string) (Status, error) {
	switch st := Status(s); st {
	case StatusPending, StatusPublished, StatusDead:
		return st, nil
	}
	return "", &UnknownStatusError{ID: id, Status: s}
}

// Entry is a message to enqueue for a destination.
type Entry struct {
	Destination transport.Destination
	Message     transport.Message
}

// Record is one outbox row as a store reads it.
type Record struct {
	ID          int64
	Destination transport.Destination // as stored; the Processor validates it
	Message     transport.Message
	CreatedAt   time.Time
	// VisibleAfter is when the row may next be claimed.
	VisibleAfter time.Time
	// Attempts counts failed publishes; Deferrals counts the batches that skipped the
	// row because its circuit was open. A deferral never consumes an attempt.
	Attempts, Deferrals int
	// FirstDeferredAt is the time of the first deferral (zero when never deferred); it
	// is set once and never cleared.
	FirstDeferredAt time.Time
	Status          Status
	LastError       string
	// SettledAt is when the row was published or became dead; zero while pending.
	// Retention counts from it.
	SettledAt time.Time
	// LeaseOwner and LeaseUntil say which dispatcher holds the row and until when;
	// empty and zero when nobody does.
	LeaseOwner string
	LeaseUntil time.Time
}

// Deferral asks a store to put back, without consuming an attempt, the rows of one
// destination whose circuit is open. A store applies it to every listed row that
// owner still leases, in one operation (PostgreSQL: one UPDATE statement):
//
//	if Now - coalesce(first_deferred_at, Now) > MaxDeferral:
//	    status = dead, last_error = ReasonDeferralExhausted
//	else:
//	    visible_after = greatest(visible_after, NotBefore) + Jitter
//	    deferrals += 1, first_deferred_at = coalesce(first_deferred_at, Now)
//
// attempts are left alone and the lease is released.
type Deferral struct {
	Owner       string
	IDs         []int64
	Now         time.Time
	NotBefore   time.Time
	Jitter      time.Duration
	MaxDeferral time.Duration
}

// Failure is the outcome of a failed publish for one row: the store adds one to its
// attempts, records Err as its last error and either makes it visible again at
// RetryAt or, when Dead is set, marks it dead.
type Failure struct {
	ID      int64
	RetryAt time.Time
	Dead    bool
	Err     string
}

// Store keeps outbox rows. Every method that changes a claimed row touches it only
// while owner still leases it and it is pending, so a dispatcher whose lease ran out
// and was taken over changes nothing. Implementations must be safe for concurrent use
// by several processors.
type Store interface {
	// Claim leases to owner, until now+lease, up to limit pending rows whose
	// visible_after and lease (if any) have passed at now, taking the earliest
	// visible_after first, and returns them by ascending id (enqueue order). No two
	// claims return the same row while its lease lasts.
	Claim(ctx context.Context, owner string, now time.Time, limit int, lease time.Duration) ([]Record, error)
	// MarkPublished marks the rows published and releases them.
	MarkPublished(ctx context.Context, owner string, now time.Time, ids []int64) error
	// Defer applies a Deferral and returns how many rows were deferred and how many
	// became dead.
	Defer(ctx context.Context, d Deferral) (deferred, dead int, err error)
	// Fail applies the failures and releases the rows.
	Fail(ctx context.Context, owner string, failures []Failure) error
	// Release gives back every pending row owner still leases, so that it can be
	// claimed at once.
	Release(ctx context.Context, owner string) error
	// Backlog returns the number of pending rows and the age of the oldest of them
	// (zero when there is none). Its signature fits a telemetry gauge callback.
	Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error)
}
