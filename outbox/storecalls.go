package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// StoreError is an error of a call the Processor made to its store: the operation
// ("claim", "mark_published", "defer", "fail", "hold", "unhold", "release",
// "delete_settled", "session") and the store's error. A call that got no answer within the
// store timeout (WithStoreTimeout) is a StoreError whose Err wraps
// context.DeadlineExceeded.
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string { return "outbox: store " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// StoreErrorHooks is an optional interface of the Hooks given to WithHooks: the
// Processor calls RecordStoreError once for each store call that failed, with the
// call's StoreError.Op. Package telemetry's Metrics implements it
// (brokerguard.outbox.store.errors).
type StoreErrorHooks interface {
	RecordStoreError(op string)
}

// The store operations a StoreError names.
const (
	OpClaim         = "claim"
	OpMarkPublished = "mark_published"
	OpDefer         = "defer"
	OpFail          = "fail"
	OpHold          = "hold"
	OpUnhold        = "unhold"
	OpRelease       = "release"
	OpBacklog       = "backlog"
	OpDeleteSettled = "delete_settled"
	OpSession       = "session"
)

// WithStoreTimeout bounds every store call the Processor makes (claim, write-backs,
// holds, release, retention) to d, so that a database that stopped answering (a lost
// host, a half-open connection behind a load balancer, a failover whose old address
// went silent) is an error within d rather than a dispatcher stuck for good. The
// default is a third of the lease (10s with the default lease): a claim that takes
// longer leaves too little of the lease for publishing anyway.
func WithStoreTimeout(d time.Duration) ProcessorOption {
	return positive("WithStoreTimeout", d, func(p *Processor) { p.storeTimeout = d })
}

// boundedStore is the Processor's view of its store: every call has the store
// timeout, and every failure is a *StoreError counted by the hooks. Calls whose
// caller's context had already ended are passed through unchanged and not counted:
// a stopping Run is not a store failure.
type boundedStore struct {
	inner   Store
	timeout time.Duration
	hooks   StoreErrorHooks // nil: none
}

var (
	_ Store  = boundedStore{}
	_ Purger = boundedStore{}
)

// call runs f with the timeout and turns its error into a StoreError.
func (b boundedStore) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	err := f(cctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if cctx.Err() != nil && !errors.Is(err, context.DeadlineExceeded) {
		// One line that matches both: errors.Join would write the cause on a second.
		err = fmt.Errorf("no answer within %v (%w): %w", b.timeout, context.DeadlineExceeded, err)
	} else if cctx.Err() != nil {
		err = fmt.Errorf("no answer within %v: %w", b.timeout, err)
	}
	if b.hooks != nil {
		b.hooks.RecordStoreError(op)
	}
	return &StoreError{Op: op, Err: err}
}

func (b boundedStore) Claim(ctx context.Context, r ClaimRequest) (recs []Record, err error) {
	err = b.call(ctx, OpClaim, func(ctx context.Context) error { recs, err = b.inner.Claim(ctx, r); return err })
	return recs, err
}

func (b boundedStore) MarkPublished(ctx context.Context, token string, now time.Time, ids []int64) (n int, err error) {
	err = b.call(ctx, OpMarkPublished, func(ctx context.Context) error {
		n, err = b.inner.MarkPublished(ctx, token, now, ids)
		return err
	})
	return n, err
}

func (b boundedStore) Defer(ctx context.Context, d Deferral) (n int, err error) {
	err = b.call(ctx, OpDefer, func(ctx context.Context) error { n, err = b.inner.Defer(ctx, d); return err })
	return n, err
}

func (b boundedStore) Fail(ctx context.Context, token string, failures []Failure) (failed, dead int, err error) {
	err = b.call(ctx, OpFail, func(ctx context.Context) error {
		failed, dead, err = b.inner.Fail(ctx, token, failures)
		return err
	})
	return failed, dead, err
}

func (b boundedStore) Hold(ctx context.Context, h Hold) (dead int, err error) {
	err = b.call(ctx, OpHold, func(ctx context.Context) error { dead, err = b.inner.Hold(ctx, h); return err })
	return dead, err
}

func (b boundedStore) Unhold(ctx context.Context, d transport.Destination, token string) error {
	return b.call(ctx, OpUnhold, func(ctx context.Context) error { return b.inner.Unhold(ctx, d, token) })
}

func (b boundedStore) Release(ctx context.Context, token string) error {
	return b.call(ctx, OpRelease, func(ctx context.Context) error { return b.inner.Release(ctx, token) })
}

func (b boundedStore) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	err = b.call(ctx, OpBacklog, func(ctx context.Context) error {
		pending, oldest, err = b.inner.Backlog(ctx)
		return err
	})
	return pending, oldest, err
}

// DeleteSettled needs an inner Purger; NewProcessor refuses WithRetention otherwise.
func (b boundedStore) DeleteSettled(ctx context.Context, publishedBefore, deadBefore time.Time, limit int) (n int, err error) {
	pg, ok := b.inner.(Purger)
	if !ok {
		return 0, fmt.Errorf("outbox: the store (%T) cannot delete rows: it is no Purger", b.inner)
	}
	err = b.call(ctx, OpDeleteSettled, func(ctx context.Context) error {
		n, err = pg.DeleteSettled(ctx, publishedBefore, deadBefore, limit)
		return err
	})
	return n, err
}
