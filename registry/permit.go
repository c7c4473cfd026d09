package registry

import (
	"context"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Permit is the right to make one call to a destination, handed out by Acquire and
// AcquireN: the destination circuit's permit and, when the destination's admission
// control is on, the admission slot the call holds. Complete it exactly once, with
// Complete, CompleteWith or Finish, which give the slot back and complete the
// circuit's permit. The zero Permit holds nothing and completes as stale.
type Permit struct {
	circuit breaker.Permit
	slot    admission.Slot
	thr     *admission.Throttle // the destination's throttle, told how the call ended; nil when off
	// bypass marks a call a Shadow circuit admitted although its admission control
	// refused it: its outcome counts for nothing, as a circuit's own bypass's.
	bypass bool
}

// Probe reports whether the permit is a half-open circuit's probe.
func (p Permit) Probe() bool { return p.circuit.Probe() }

// acquire takes d's circuit permit for a call of n messages, then, when admission
// control is on, asks its throttle and takes its limit's slot, weighed by n and by
// the priority ctx carries (admission.WithPriority). An open circuit costs nothing
// more; a probe, and a call a Shadow or FailOpen circuit admitted as a bypass, are
// never refused by admission control and take no slot, but their outcomes feed the
// throttle. A refusal gives the circuit's permit back unchanged.
func (e *entry) acquire(ctx context.Context, n int) (Permit, error) {
	cp, err := e.circuit.Acquire(ctx)
	p := Permit{circuit: cp, thr: e.thr}
	if err != nil || cp.Probe() || cp.Bypass() {
		return p, err
	}
	// The throttle first: while it refuses nothing it costs one atomic load, and a
	// call it refuses takes no slot from the limit.
	err = e.thr.Admit()
	if err == nil && e.adm != nil {
		p.slot, err = e.adm.Acquire(n, admission.PriorityOf(ctx))
	}
	if err == nil {
		return p, nil
	}
	if e.onBypass != nil { // Shadow: watch, do not refuse
		e.onBypass(breaker.Bypass{Identity: e.dest.String(), Mode: breaker.Shadow, State: breaker.Closed,
			Generation: cp.Generation(), Err: err})
		return Permit{circuit: cp, thr: e.thr, bypass: true}, nil
	}
	cp.Complete(breaker.Neutral) // gives back what the circuit lent, changes nothing
	return Permit{}, err
}

// end completes p's circuit permit with o and err (as a missed deadline when missed),
// then gives its slot back with res, once: only the permit's first end does anything.
// It returns whether the circuit took the outcome into account. The throttle is told
// thr (an answer, an error answer or a drop; nothing for Ignored) when the circuit's
// permit was live, which is once: a stale permit (of a generation that has ended, or
// under an override) is old news for the throttle too. A call that holds a slot tells
// the throttle through it, with the one clock reading of its release.
func (p Permit) end(o breaker.Outcome, res, thr admission.Result, err error, missed bool) bool {
	var live bool
	switch {
	case p.bypass:
		live = p.circuit.Complete(breaker.Neutral)
	case missed:
		live = p.circuit.CompleteMissed(err)
	default:
		live = p.circuit.CompleteWith(o, err)
	}
	if !live || p.thr == nil {
		thr = admission.Ignored
	}
	if !p.slot.ReleaseRecording(res, p.thr, thr) && thr != admission.Ignored {
		p.thr.Record(thr == admission.Success) // no slot: a probe, a bypass, or the limit off
	}
	return live && !p.bypass
}

// resultOf is what admission control learns from a call that ended with outcome o
// and no deadline of its own: an answer, an error answer, or nothing.
func resultOf(o breaker.Outcome) admission.Result {
	switch o {
	case breaker.Success:
		return admission.Success
	case breaker.Failure:
		return admission.Failure
	}
	return admission.Ignored
}

// Acquire takes a permit from destination d's circuit, and its admission control's
// slot, for a call of one message, or returns the error a guarded publisher returns
// instead of calling: the registry's own (an invalid destination, the cap), the
// caller's context error, or the refusal as a *RejectedError. Publishers that complete
// permits themselves (asynchronous writers) use it with Start, Outcome and Complete;
// the others use Call.
func (r *Registry) Acquire(ctx context.Context, d transport.Destination) (Permit, error) {
	return r.AcquireN(ctx, d, 1)
}

// AcquireN is Acquire for a call of n messages: admission control weighs it by n and
// by the priority ctx carries (admission.WithPriority). Complete the permit with
// Finish, or with Complete.
func (r *Registry) AcquireN(ctx context.Context, d transport.Destination, n int) (Permit, error) {
	e, err := r.entry(d)
	if err != nil {
		return Permit{}, err
	}
	permit, err := e.acquire(ctx, max(n, 1))
	if err != nil {
		return Permit{}, e.refused(refusal(ctx, d, err))
	}
	return permit, nil
}

// Admission returns destination d's admission control in this process, creating d's
// circuit on first use as Circuit does, or nil when d's policy turns the adaptive
// limit off. The outbox paces its bulk work by it (admission.Limiter.BulkHeadroom).
func (r *Registry) Admission(d transport.Destination) (*admission.Limiter, error) {
	e, err := r.entry(d)
	if err != nil {
		return nil, err
	}
	return e.adm, nil
}

// Throttle returns destination d's adaptive throttle in this process, creating d's
// circuit on first use as Circuit does, or nil when d's policy turns the throttle off.
func (r *Registry) Throttle(d transport.Destination) (*admission.Throttle, error) {
	e, err := r.entry(d)
	if err != nil {
		return nil, err
	}
	return e.thr, nil
}
