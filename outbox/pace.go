package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// The outbox is bulk work. Its publishes carry admission.Bulk (admission.WithPriority),
// so that a destination whose admission control is on (registry.Policy.Admission) lets
// them use only the share of the limit that online publishers leave, a share that
// shrinks as the destination's latency rises. On such a destination the Processor
// also paces itself by the limit, which it finds through its Circuits (the
// registry's Admission method):
//
//   - a destination's rows go out in batches of at most the limit's bulk headroom
//     (admission.Limiter.BulkHeadroom), in id order; the rows past it stay leased until
//     the claim is done and are then released (no attempt, no deferral), so the next
//     claim takes them; with no headroom at all nothing is published;
//   - a publish the limit refuses (*admission.LimitError) is not an outage: the rows are
//     released the same way and the destination is not held;
//   - an outage failure while the circuit is still closed does not hold the
//     destination for WithRejectedDelay: the rows are given back uncharged, and the
//     next claim tries again after a short pause, so the outbox's failures reach the
//     circuit at the rate they happen and an outage only the outbox sees opens the
//     circuit as an online one would (then the destination is held until the
//     circuit's NotBefore, as always);
//   - after a claim that published nothing because of pacing, Run waits until the
//     limit says bulk headroom may have come back (admission.Limiter.BulkWake: a bulk
//     publish, this relay's or another's, ended, or the bulk budget grew), or at
//     most the limit's retry hint (capped by WithRejectedDelay), instead of claiming
//     again at once or sleeping past the moment it could send.
//
// Destinations without a limit are dispatched as before.

// pacing is what a claim records of the destinations it paced.
type pacing struct {
	released bool            // rows were left leased, to be released when the claim is done
	pause    time.Duration   // the shortest pause a paced destination asked for
	wake     <-chan struct{} // closed when a paced destination's bulk headroom may be back
}

func (pc *pacing) paced(pause time.Duration, wake <-chan struct{}) {
	pc.released = true
	pc.note(pause)
	if pc.wake == nil {
		pc.wake = wake
	}
}

// admissions is an optional capability of Circuits (found by type assertion;
// *registry.Registry has it): a destination's admission control in this process,
// nil when the destination's policy has none.
type admissions interface {
	Admission(d transport.Destination) (*admission.Limiter, error)
}

// limiterOf returns the adaptive limit of d's admission control, or nil when it has
// none.
func (p *Processor) limiterOf(d transport.Destination) *admission.Limiter {
	a, ok := p.circuits.(admissions)
	if !ok {
		return nil
	}
	l, err := a.Admission(d)
	if err != nil {
		return nil
	}
	return l
}

// pauseOf is how long to wait before trying a paced destination again.
func (p *Processor) pauseOf(l *admission.Limiter) time.Duration {
	if l == nil {
		return p.rejectedDelay
	}
	return min(max(l.RetryAfter(), time.Millisecond), p.rejectedDelay)
}

// pace returns the rows of recs to publish now, given d's limit l: all of them
// without a limit or for a probe, else as many as the bulk headroom admits. The rest
// stay leased and are released when the claim is done.
func (p *Processor) pace(pc *pacing, l *admission.Limiter, recs []Record) []Record {
	if l == nil || len(recs) == 0 || recs[0].Probe {
		return recs
	}
	wake := l.BulkWake() // before looking, so that a release after the look wakes Run
	n := l.BulkHeadroom()
	if n >= len(recs) {
		return recs
	}
	pc.paced(p.pauseOf(l), wake)
	return recs[:n]
}

// publishBulk publishes msgs to d as bulk work.
func (p *Processor) publishBulk(ctx context.Context, d transport.Destination, msgs []transport.Message) error {
	return p.pub.Publish(admission.WithPriority(ctx, admission.Bulk), d, msgs...)
}

// refusalPause reports whether err is a refusal by d's admission control (its
// adaptive limit or its throttle: the destination is busy or shedding, not down), and
// how long the batch's rows wait before the next try: until the limit expects room,
// or until the throttle next revises its odds, within WithRejectedDelay.
func (p *Processor) refusalPause(d transport.Destination, err error, now time.Time) (time.Duration, bool) {
	if !errors.Is(err, admission.ErrRefused) {
		return 0, false
	}
	var te *admission.ThrottleError
	if errors.As(err, &te) {
		return min(max(te.NotBefore.Sub(now), time.Millisecond), p.rejectedDelay), true
	}
	return p.pauseOf(p.limiterOf(d)), true
}

// releasePaced gives back the rows a claim left leased for pacing.
func (p *Processor) releasePaced(ctx context.Context, pc *pacing, token string) error {
	if !pc.released {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lease)
	defer cancel()
	return p.store.Release(rctx, token)
}

// note records a pause asked for by a destination whose rows were written back.
func (pc *pacing) note(pause time.Duration) {
	if pause > 0 && (pc.pause == 0 || pause < pc.pause) {
		pc.pause = pause
	}
}

// retryOutage reports whether an outage failure pubErr of a publish to d, made at
// now, is to be retried after a short pause rather than held for WithRejectedDelay:
// d has an adaptive limit and its circuit is still closed, so the next failure is
// evidence it needs. Refusals by the circuit (open, ramping, saturated, unavailable)
// are held as before.
func (p *Processor) retryOutage(d transport.Destination, now time.Time, pubErr error) bool {
	if errors.Is(pubErr, breaker.ErrOpen) || errors.Is(pubErr, breaker.ErrSaturated) || errors.Is(pubErr, breaker.ErrUnavailable) {
		return false
	}
	return p.limiterOf(d) != nil && p.unavailableUntil(d, now).IsZero()
}

// after records what a send asked for: a pause, and a release of rows it left leased.
func (pc *pacing) after(r sent) {
	if r.leased {
		pc.paced(r.pause, r.wake)
	} else {
		pc.note(r.pause)
	}
}

// bulkWake is l's BulkWake, or nil (never closed) without a limit.
func bulkWake(l *admission.Limiter) <-chan struct{} {
	if l == nil {
		return nil
	}
	return l.BulkWake()
}
