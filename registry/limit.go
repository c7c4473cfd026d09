package registry

import (
	"context"
	"errors"
	"os"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Finish completes the permit of a call of n messages to d that returned err, as
// Guard does: Outcome, with the deadline rule for the circuit and admission control
// (see Outcome), and counts the call (WithCallCounts). It returns the outcome the
// circuit was given. Publishers that complete permits themselves use it instead of
// Outcome and Complete.
func (r *Registry) Finish(ctx context.Context, d transport.Destination, p Permit, s Start, err error, n int, classify transport.Classifier) breaker.Outcome {
	if classify == nil {
		classify = failAll
	}
	e, ok := r.lookup(d)
	if !ok {
		o := Outcome(ctx, s, err, n, classify)
		res := resultOf(o)
		p.end(o, res, res, err, false)
		return o
	}
	return e.settle(ctx, p, Outcome(ctx, s, err, n, classify), s, err, n)
}

// settle completes p with o, the Outcome of a call of n messages that returned err,
// applying the deadline rule: what a deadline or a timeout that ended the call says to
// the circuit and to admission control.
func (e *entry) settle(ctx context.Context, p Permit, o breaker.Outcome, s Start, err error, n int) breaker.Outcome {
	if err == nil || !errors.Is(endedBy(ctx, err), context.DeadlineExceeded) {
		if o == breaker.Failure && noAnswer(err) {
			// The client's own clock gave up on the broker (a read deadline, a
			// heartbeat): a missed deadline too, not an error answer.
			e.end(p, o, admission.Dropped, admission.Dropped, err, true)
			return o
		}
		res := resultOf(o)
		o = e.judged(p, o)
		e.end(p, o, res, res, err, false)
		return o
	}
	// The call was ended by its deadline. One that started with less than
	// MinCallBudget says nothing to any judge: Outcome made it Neutral, and
	// admission control ignores it (neither a drop nor a deadline to learn).
	if s.short {
		e.end(p, o, admission.Ignored, admission.Ignored, err, false)
		return o
	}
	lim := e.adm
	// It never reached a destination that answers other calls (it was still in the
	// client's set-up, a channel opening at the slow pace): no evidence, and no work
	// the limit must shed; the opening goes on, and serves a later call.
	if lim != nil && o == breaker.Failure && errors.Is(err, transport.ErrNotSent) && lim.Answered() {
		e.end(p, breaker.Neutral, admission.Ignored, admission.Ignored, err, false)
		return breaker.Neutral
	}
	// Otherwise a drop for admission control whatever the circuit makes of it, and no
	// evidence against a destination that is merely busy with this process's bulk
	// work, that answers a good share of its calls in time (slow or overloaded: the
	// limit contracts), or whose first wave of calls is still opening connections.
	if lim != nil && o == breaker.Failure && (lim.Busy() || lim.Answering() || s.cold && startUpWave(lim, p, n)) {
		o = breaker.Neutral
	}
	// The throttle takes the miss as the destination's only when the circuit would:
	// a slow destination is the limit's to answer, and this process's bulk work or
	// cold start is not the destination's doing.
	thr := admission.Ignored
	if o == breaker.Failure {
		thr = admission.Dropped
	}
	// A Failure is a missed deadline, not an error answer: the circuit it opens
	// probes for the recovery back to back (breaker.Permit.CompleteMissed).
	e.end(p, o, admission.Dropped, thr, err, o == breaker.Failure)
	return o
}

// startUpWave reports whether a call of n messages that started while lim was cold
// (no call had ended with a verdict) belongs to a start-up wave: another call is in
// flight beside it, or one has ended since it started (it warmed lim; only a call
// that overlapped this one can have). A cold start's first wave of slow connects is
// no verdict; a call that was alone is judged like any other, so that a destination
// called once every few minutes opens within its threshold. Cold is read again after
// the in-flight count: a call ending meanwhile leaves the count before it warms lim.
func startUpWave(lim *admission.Limiter, p Permit, n int) bool {
	own := max(n, 1) // the call's weight in the limit; a probe or a bypass takes no slot
	if p.bypass || p.circuit.Probe() || p.circuit.Bypass() {
		own = 0
	}
	return !lim.Cold() || lim.Stats().InFlight > own || !lim.Cold()
}

// judged is what the circuit is told of a call that ended with o, an answer (not a
// missed deadline, which the deadline rule judges): a Failure is Neutral while the
// destination accepts a useful share of the calls sent to it
// (admission.Throttle.Accepting: at least 1 in 20 of the trailing second's calls, at
// least the throttle's MinSent of them, and not a last eighth of a second of MinSent
// calls all failed). Such a destination is in a brownout, and
// the throttle sheds in proportion to its failures; opening the circuit would refuse
// the share it still accepts, and its failures are fast, so refusing saves the
// callers nothing. The circuit judges a destination that accepts (almost) nothing, or
// whose calls are too rare to fill the window, and its own probes, as before. Without
// a throttle, o is unchanged. Missed deadlines are not judged here: they cost the
// callers their deadlines, and the deadline rule tells a slow destination (the limit's
// to answer) from a hung one (the circuit's).
func (e *entry) judged(p Permit, o breaker.Outcome) breaker.Outcome {
	if o == breaker.Failure && !p.Probe() && e.thr.Accepting() {
		return breaker.Neutral
	}
	return o
}

// evictable reports whether idle eviction may drop e: its circuit is closed, with no
// override, nothing in flight, and no failure evidence (a circuit counting failures
// of rare traffic must keep them, or it could never open); its last call that ended
// with a verdict succeeded (a failure the registry excused, such as a missed deadline
// of a cold start's first wave, is evidence too); nothing holds its admission
// control; and no partition of it is isolated.
func (e *entry) evictable() bool {
	if e.failing.Load() {
		return false
	}
	s := e.circuit.Snapshot()
	return s.State == breaker.Closed && s.Override == breaker.NoOverride && s.InFlight == 0 &&
		s.Probes == 0 && s.Failures == 0 && (e.adm == nil || e.adm.Stats().InFlight == 0) &&
		e.isolatedPartitions() == nil
}

// noAnswer reports whether err says the broker did not answer in time by the client's
// own clock (transport.ErrNoAnswer, or a net timeout).
func noAnswer(err error) bool {
	return errors.Is(err, transport.ErrNoAnswer) || errors.Is(err, os.ErrDeadlineExceeded)
}
