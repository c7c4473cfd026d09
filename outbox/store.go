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

// Dead reasons: the LastError of a dead row starts with one of these, followed by
// ": " and the detail when there is one.
const (
	// ReasonDeferralExhausted: the row's destination was held (its circuit open or
	// its publishes failing as an outage) for longer than MaxCircuitDeferral of the
	// time since the row was enqueued.
	ReasonDeferralExhausted = "circuit_deferral_exhausted"
	// ReasonAttemptsExhausted: MaxAttempts publishes failed for reasons of the
	// message's own; the detail is the last error.
	ReasonAttemptsExhausted = "attempts_exhausted"
	// ReasonInvalidDestination: the stored destination is not a valid one.
	ReasonInvalidDestination = "invalid_destination"
	// ReasonUndecodable: the store could not decode the row (for example headers that
	// are not the JSON the outbox writes); the detail says what was wrong.
	ReasonUndecodable = "undecodable"
)

// Entry is a message to enqueue for a destination.
type Entry struct {
	Destination transport.Destination
	Message     transport.Message
}

// ErrTooLarge is matched (errors.Is) by the *TooLargeError of an entry over its size
// limit.
var ErrTooLarge = errors.New("outbox: message too large")

// TooLargeError is an entry whose message is larger than the limit Enqueue applies.
type TooLargeError struct {
	Destination transport.Destination
	Bytes, Max  int
}

// Error names the destination, the size and the limit.
func (e *TooLargeError) Error() string {
	return "outbox: a message of " + strconv.Itoa(e.Bytes) + " bytes for " + e.Destination.String() +
		" is over the limit of " + strconv.Itoa(e.Max) + " bytes (storekit.DefaultMaxEntryBytes, or the store's own limit)"
}

// Is reports whether target is ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Record is one outbox row as a store reads it.
type Record struct {
	ID          int64
	Destination transport.Destination // as stored; the Processor validates it
	Message     transport.Message
	CreatedAt   time.Time
	// VisibleAfter is when the row may next be claimed.
	VisibleAfter time.Time
	// Attempts counts publishes that failed for reasons of the message's own;
	// Deferrals counts the times the row was claimed and given back, uncharged,
	// because its destination was unavailable.
	Attempts, Deferrals int
	// FirstDeferredAt is the time of the first deferral (zero when never deferred); it
	// is set once and never cleared.
	FirstDeferredAt time.Time
	Status          Status
	LastError       string
	// SettledAt is when the row was published or became dead; zero while pending.
	// Retention counts from it.
	SettledAt time.Time
	// LeaseOwner and LeaseUntil say which claim holds the row (its token) and until
	// when; empty and zero when nobody does.
	LeaseOwner string
	LeaseUntil time.Time
	// Probe is set by Claim on rows taken as the probe of a destination whose hold
	// had ended (see Hold).
	Probe bool
	// Undecodable, when not empty, says why the store could not decode the row; its
	// Message is then incomplete and the Processor makes the row dead.
	Undecodable string
}

// ClaimRequest asks a store for a batch. Token names the claim: it must be unique per
// claim (the Processor draws one per ProcessPending), and every write-back names it,
// so that a write-back changes only rows this claim still holds.
type ClaimRequest struct {
	Token string
	Now   time.Time
	Limit int
	Lease time.Duration
	// ProbeLimit is how many rows of a destination whose hold has ended the claim
	// takes as that destination's probe (at least 1).
	ProbeLimit int
	// MaxBytes, when positive, bounds the claim in bytes as Limit bounds it in rows:
	// the rows claimed (probes aside) carry at most MaxBytes of keys, values and
	// headers together, as the store measures them, unless the first row alone is
	// larger, which is then claimed alone.
	MaxBytes int
}

// Deferral gives back, without consuming an attempt, claimed rows whose destination
// is unavailable: for each listed row Token still leases, deferrals += 1,
// first_deferred_at = coalesce(first_deferred_at, Now), and the lease is released.
// visible_after is left alone: the destination's Hold keeps the rows back.
type Deferral struct {
	Token string
	IDs   []int64
	Now   time.Time
}

// Hold keeps a destination's rows from being claimed until Until: while a hold lasts
// no claim (of any dispatcher sharing the store) takes the destination's rows, and
// when it ends the next claim takes only ProbeLimit of them as the probe and extends
// the hold by its lease. A store applies a Hold in one write per destination:
//
//	held_until = Until if Token holds the destination's probe, else greatest(held_until, Until)
//	held_since = coalesce(held_since, Now)
//
// and, when Now - held_since > MaxDeferral, makes dead (ReasonDeferralExhausted) the
// destination's pending rows that no other claim leases and that were enqueued more
// than MaxDeferral before Now (their wait has been held as long as that).
type Hold struct {
	Destination transport.Destination
	Token       string
	Now, Until  time.Time
	MaxDeferral time.Duration
	// Reason, when not empty, says the destination is held because it is unusable
	// (breaker.Unusable: missing, forbidden, misconfigured) and why; empty for an
	// outage. The store keeps the last Hold's Reason for OnCall.Holds.
	Reason string
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
// while the claim whose token it is given still leases it and it is pending, so a
// claim whose lease ran out and was taken over changes nothing. Each returns the
// number of rows it changed. Implementations must be safe for concurrent use by
// several processors.
type Store interface {
	// Claim leases to r.Token, until Now+Lease, pending rows that are due: their
	// visible_after and lease (if any) have passed, no earlier pending row of the same
	// destination and key is waiting or leased, and their destination is not held.
	// It takes up to r.Limit of them, oldest (lowest id) first, and first, for each
	// destination whose hold has ended, up to r.ProbeLimit rows as its probe (Probe
	// set), extending that hold by the lease; a hold whose destination has no pending
	// row left is dropped. Rows come back by ascending id (enqueue order). No two
	// claims return the same row while its lease lasts.
	//
	// A store with Sessions shares keys that are fewer than a batch among the live
	// sessions: when a key comes back among the first r.Limit candidates and n > 1
	// sessions are open, the claim takes the rows of the first ceil(keys / n) keys
	// (by their first row) among the first n*r.Limit candidates, and unkeyed rows,
	// instead of the oldest rows of every key; the other relays' claims find the
	// rest of the keys free (storetest FewKeysAreSharedByTheLiveSessions).
	Claim(ctx context.Context, r ClaimRequest) ([]Record, error)
	// MarkPublished marks the rows published and releases them.
	MarkPublished(ctx context.Context, token string, now time.Time, ids []int64) (int, error)
	// Defer applies a Deferral.
	Defer(ctx context.Context, d Deferral) (int, error)
	// Fail applies the failures and releases the rows; it returns how many rows it
	// failed for a retry and how many it made dead.
	Fail(ctx context.Context, token string, failures []Failure) (failed, dead int, err error)
	// Hold applies a Hold and returns how many rows it made dead.
	Hold(ctx context.Context, h Hold) (dead int, err error)
	// Unhold ends the hold of d if token holds its probe (the probe went out), so
	// that its rows are claimed normally again.
	Unhold(ctx context.Context, d transport.Destination, token string) error
	// Release gives back every pending row token still leases, so that it can be
	// claimed at once.
	Release(ctx context.Context, token string) error
	// Backlog returns the number of pending rows and the age of the oldest of them
	// (zero when there is none). Its signature fits a telemetry gauge callback.
	Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error)
}
