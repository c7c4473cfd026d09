package breaker

import (
	"sync/atomic"
	"time"
)

// ramp paces the calls of a circuit that has just closed from half-open, so that the
// callers who waited out the break do not all return to a broker that has only just
// recovered (Policy.RampDuration). It decides each call with no lock and no clock of
// its own: the caller passes the time since the close. A Breaker makes one per
// recovery; a backend that keeps the circuit elsewhere makes one from the close time
// it stored (backend.NewRamp), so that every process ramps on the same schedule. It is safe for
// concurrent use.
type ramp struct {
	policy   Policy
	identity string
	closedAt time.Time
	slot     time.Duration // the spacing of the NotBefore values handed out

	// seq numbers the calls. Call n is admitted when the n-th point of a Weyl
	// sequence (n times the golden ratio, modulo 1) falls below the share: the points
	// fill [0, 1) so evenly that any run of calls admits the share to within a few
	// calls, with one atomic add and no random source. The sequence starts at the seed,
	// so that replicas seeing the same traffic do not err the same way, and the same
	// seed and calls give the same decisions under a fake clock.
	seq atomic.Uint64
	// rejects keeps the refusals made for recent NotBefore slots, so that turning a
	// call away allocates only once per slot.
	rejects [rampSlots * 2]atomic.Pointer[rampReject]
}

// rampSlots is the number of NotBefore values a refusal is spread over: the next
// eighth of the ramp, cut in rampSlots slots.
const rampSlots = 16

type rampReject struct {
	slot int64
	err  *OpenError
}

// golden is 2^64 divided by the golden ratio, rounded to odd.
const golden = 0x9E3779B97F4A7C15

// newRamp returns the ramp of a circuit named identity that closed at closedAt under
// policy p, or nil when p has no ramp. seed picks where its sequence of decisions
// starts: give each process its own (a Breaker draws it from its random source).
func newRamp(identity string, p Policy, closedAt time.Time, seed uint64) *ramp {
	if p.RampDuration <= 0 {
		return nil
	}
	r := &ramp{
		policy:   p.normalized(),
		identity: identity,
		closedAt: closedAt,
		slot:     max(p.RampDuration/(8*rampSlots), 1),
	}
	r.seq.Store(seed)
	return r
}

// until returns when the ramp ends and every call is admitted again.
func (r *ramp) until() time.Time { return r.closedAt.Add(r.policy.RampDuration) }

// admit decides one call made a time since after the close. It returns the share of calls the
// ramp admits now (rampShare) and, when it turns this call away, the refusal:
// an *OpenError matching ErrOpen, with Ramping set, whose NotBefore is spread evenly over
// the next eighth of the ramp, so that the callers it turns away come back at
// different times. A refusal changes nothing but the ramp's own call count.
func (r *ramp) admit(since time.Duration) (share float64, refusal *OpenError) {
	share = r.policy.rampShare(since)
	if share >= 1 {
		return 1, nil
	}
	x := r.seq.Add(1) * golden
	limit := uint64(share * 0x1p64)
	if x < limit {
		return share, nil
	}
	// x is spread evenly over [limit, 2^64): its place there picks the slot.
	return share, r.refusal(since, (x-limit)/((^limit)/rampSlots+1))
}

// refuse returns a refusal for a call made a time since after the close that the ramp turns
// away for a reason of the caller's own (a Breaker's in-flight bound, which rises with
// the share), spread like admit's.
func (r *ramp) refuse(since time.Duration) *OpenError {
	return r.refusal(since, (r.seq.Add(1)*golden)>>60)
}

// refusal returns the refusal whose NotBefore is the k-th (0 to rampSlots-1) slot
// boundary after since.
func (r *ramp) refusal(since time.Duration, k uint64) *OpenError {
	slot := int64(max(since, 0)/r.slot) + 1 + int64(k)
	c := &r.rejects[slot%int64(len(r.rejects))]
	if e := c.Load(); e != nil && e.slot == slot {
		return e.err
	}
	e := &rampReject{slot: slot, err: newRampError(r.identity, r.policy.Scope, r.closedAt.Add(time.Duration(slot)*r.slot))}
	c.Store(e)
	return e.err
}
