package outbox

import (
	"cmp"
	"context"
	"time"
)

// Run dispatches batches until ctx ends. After a batch that claimed rows it claims
// again at once; only when nothing was due does it wait, for the poll interval or, with
// a Waker, until the Waker signals, whichever comes first. The Waker is the one given
// to WithWaker or, without one, the store's own (CommitWaker), if it has one. With
// WithRetention it also deletes old settled rows, one bounded batch between claims.
// With a store that has sessions (Sessions), Run first opens one for its claims, so
// that if its process dies the other dispatchers take its rows at once instead of
// waiting for its leases to end. It runs in the caller's goroutine and starts none
// but the Waker's (and the store's session's, if any). When ctx ends it
// releases the rows its batch still leases, so a stopped Run leaves no row leased, and
// returns nil (or the release's error).
//
// Run does not end on errors: after a failed batch it passes the error to the
// WithErrorHandler function (by default it is logged through log/slog), releases the
// batch's rows (if the release fails too, it tries again once a batch succeeds, so
// the rows come back before their lease ends), and claims again after a capped,
// jittered backoff (WithErrorBackoff)
// that grows while batches keep failing and starts over after one that succeeds. No
// error is treated as final: a missing table can be migrated, a permission granted,
// a database brought back.
func (p *Processor) Run(ctx context.Context) error {
	release := func(token string) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lease)
		defer cancel()
		return p.store.Release(rctx, token)
	}
	defer p.openSession(ctx)() // session.go
	w := p.startWaker(ctx)
	defer w.stop()
	timer := time.NewTimer(p.poll)
	defer timer.Stop()
	failures := 0           // batches failed in a row
	var unreleased []string // tokens of failed batches whose release failed too (runerrors.go)
	for {
		drain(w.wake)      // this claim sees every row announced so far
		if failures == 0 { // the store answers again
			unreleased = p.releaseAgain(ctx, unreleased, release)
		}
		rep, token, err := p.process(ctx)
		if ctx.Err() != nil {
			// The first failure only: the others repeat the same cause (a store that
			// does not answer), one line each.
			err := release(token)
			return cmp.Or(err, p.releaseAll(unreleased, release))
		}
		var more bool
		if err != nil {
			p.onError(err) // before the release, which may wait for a silent store too
			if release(token) != nil {
				unreleased = append(unreleased, token)
			}
		} else {
			if more, err = p.retain(ctx, p.now()); err != nil {
				p.onError(err)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		idle, wait := true, p.poll
		var paced <-chan struct{} // ends a pacing pause early (pace.go)
		if err != nil {
			failures++
			wait = p.errorBackoff.delay(failures, p.random())
		} else if failures = 0; rep.Claimed > 0 || more {
			if rep.Pause == 0 {
				continue
			}
			wait, paced = rep.Pause, rep.wake // paced by a destination's limit (pace.go)
		}
		timer.Reset(wait)
		for idle {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				idle = false
			case <-paced:
				idle = false
			case <-w.wake:
				// After an error, wait out the backoff: a signal must not turn a
				// failing store into a busy loop.
				idle = err != nil
			case lerr := <-w.failed:
				p.onError(lerr)
			}
		}
	}
}
