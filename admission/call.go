package admission

import (
	"context"
	"strconv"
)

// Priority says whose call it is: an online call (a request being served) or bulk
// work (an outbox drain, a backfill), which yields first when the destination is
// under pressure.
type Priority uint8

// The priorities of a call.
const (
	// Online is the zero Priority: a call someone is waiting for.
	Online Priority = iota
	// Bulk is work that can wait: it may use only the capacity online calls leave
	// (LimitPolicy.BulkShare), which shrinks under pressure.
	Bulk
)

// String returns "online" or "bulk".
func (p Priority) String() string {
	if p == Bulk {
		return "bulk"
	}
	return "online"
}

type priorityKey struct{}

// WithPriority returns a context that marks the calls made with it as of priority p.
// Guarded publishers read the mark when their destination's admission control is on;
// the outbox marks its publishes Bulk.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityOf returns the priority ctx was marked with (WithPriority), Online when none.
func PriorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

// Result is how an admitted call ended, as admission control sees it. The zero Result
// is Ignored.
type Result uint8

// The results a call's slot is released with.
const (
	// Ignored says nothing about the destination: the caller gave up, the message was
	// refused for a reason of its own, or the call started with too little time to
	// be judged. The slot is given back and nothing is learned.
	Ignored Result = iota
	// Success is an answer: the call's latency is a sample of the destination's.
	Success
	// Failure is an error answer from the destination, or the path to it: the limit
	// contracts.
	Failure
	// Dropped is a call that ended without an answer: a deadline it started with
	// enough time for passed, or the client's own timeout gave up. The limit
	// contracts, and an online call's latency tells the bulk budget how long online
	// callers wait. A deadline too short to be a verdict is Ignored, not Dropped.
	Dropped
)

// String returns "ignored", "success", "failure" or "dropped".
func (r Result) String() string {
	switch r {
	case Ignored:
		return "ignored"
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Dropped:
		return "dropped"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}
