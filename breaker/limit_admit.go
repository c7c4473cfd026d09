package breaker

import (
	"context"
	"time"
)

// AcquireRequest is Acquire for a call described by r: its weight in messages and its
// priority, which the circuit's adaptive limit (Policy.Limit) admits by. Without a
// limit it is Acquire, and r is ignored. Over the limit it fails at once with a
// *LimitError (errors.Is ErrSaturated) whose NotBefore says when a slot is likely to
// be free; bulk calls are refused first (LimitPolicy).
func (b *Breaker) AcquireRequest(ctx context.Context, r Request) (Permit, error) {
	if b.lim == nil {
		return b.Acquire(ctx)
	}
	if err := ctx.Err(); err != nil {
		return Permit{}, err
	}
	return b.acquireSlow(b.cur.Load(), r)
}

// Limiter returns the circuit's adaptive limit, or nil when its policy has none.
func (b *Breaker) Limiter() *Limiter { return b.lim }

// admitLimited admits a call into the closed phase ph through the adaptive limit,
// then MaxInFlight (bounded by limit). A ramp (r, with the share it admits now and the
// time since the close) scales the limit by its share, so that the ramp paces
// messages rather than calls; a call that only the scaled limit turns away gets the
// ramp's refusal.
func (b *Breaker) admitLimited(ph *phase, now int64, req Request, limit int64, share float64, r *Ramp, since time.Duration) (Permit, error) {
	slot, lerr := b.lim.admit(now, req, share)
	if lerr != nil {
		if r != nil && share < 1 {
			b.rampRefused.Add(1)
			return b.refuse(ph, now, r.Refuse(since))
		}
		return b.refuse(ph, now, lerr)
	}
	p, err := b.admit(ph, now, flagLimited, limit)
	if err != nil {
		b.lim.release(slot, limitIgnore, false, now)
		if err == errOverRamp {
			b.rampRefused.Add(1)
			err = r.Refuse(since)
		}
		return b.refuse(ph, now, err)
	}
	p.tok.slot = slot
	return p, nil
}

// saturated reports whether err is a refusal for lack of room (MaxInFlight or the
// adaptive limit), which FailOpen still enforces.
func saturated(err error) bool {
	if err == ErrSaturated {
		return true
	}
	_, ok := err.(*LimitError)
	return ok
}

var (
	_ RequestAcquirer = (*Breaker)(nil)
	_ Limited         = (*Breaker)(nil)
)
