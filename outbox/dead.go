package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// DeadFilter picks dead rows. The fields that are set must all match; pending and
// published rows never match.
type DeadFilter struct {
	// IDs, when not empty, limits the filter to these rows.
	IDs []int64
	// Destination, when not the zero Destination, limits it to that destination.
	Destination transport.Destination
	// Reason, when not empty, limits it to rows whose LastError is Reason or starts
	// with Reason followed by ": " (the form of a dead row's LastError), e.g.
	// ReasonAttemptsExhausted matches "attempts_exhausted: message too large".
	Reason string
}

// IsZero reports whether f sets nothing, so it would match every dead row.
func (f DeadFilter) IsZero() bool {
	return len(f.IDs) == 0 && f.Destination == (transport.Destination{}) && f.Reason == ""
}

// DefaultPageLimit is the page size of a Page whose Limit is 0.
const DefaultPageLimit = 100

// MaxPageLimit bounds a Page's Limit.
const MaxPageLimit = 10_000

// Page asks for rows by ascending id after After (0: from the start), at most Limit
// of them. The next page starts after the last id of this one.
type Page struct {
	After int64
	Limit int
}

// ErrEmptyFilter is returned by Requeue for a filter that sets nothing: requeueing
// every dead row at once is too easy to do by mistake.
var ErrEmptyFilter = errors.New("outbox: requeue: the filter sets no IDs, Destination or Reason")

// DeadLetters is a Store whose dead rows can be looked at and sent again; the memory
// store (outbox/memory) and the PostgreSQL store are DeadLetters. An admin API or CLI builds on it.
type DeadLetters interface {
	// DeadRows returns one page of the dead rows f matches, by ascending id.
	DeadRows(ctx context.Context, f DeadFilter, p Page) ([]Record, error)
	// Requeue makes the dead rows f matches pending again, visible at now, with their
	// attempts, deferrals, first deferral and settle time cleared (LastError is kept
	// as a record of what happened), and returns how many rows it changed. A store
	// may change them in several bounded batches. An empty filter is ErrEmptyFilter.
	Requeue(ctx context.Context, f DeadFilter, now time.Time) (int, error)
}

// DeadSummary is a dead row as an on-call listing shows it: the record without its
// payload (Message.Value is nil) and the payload's length. Dead rows are where
// oversized messages end up, so a listing that read their payloads would cost far
// more than it shows.
type DeadSummary struct {
	Record
	ValueBytes int
}

// DeadSummaries is an optional capability of DeadLetters (found by type assertion):
// listing dead rows without reading their payloads. The memory and PostgreSQL
// stores have it; the admin handler and the CLI use it when a store does.
type DeadSummaries interface {
	// DeadSummaries returns one page of the dead rows f matches, as DeadRows does,
	// without their payloads.
	DeadSummaries(ctx context.Context, f DeadFilter, p Page) ([]DeadSummary, error)
}
