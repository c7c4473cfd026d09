package sharedstate

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// CompletePermit records the outcome of a permit this circuit issued; Permit.Complete
// calls it once per permit. It implements backend.Completer and returns whether the
// outcome was taken into account.
//
// Closed-state evidence: a Success on a snapshot without failures writes nothing. A
// Failure adds one to the shared count, and the Success after failures resets it,
// each in one request when the driver is a Counter (otherwise a conditional replace
// of the record, which opens the circuit in the same write). A burst of successes
// after a failure sends one reset per process, not one each. Probe outcomes are
// conditional replaces. Outcomes of an older generation, under an override, of an
// expired lease, or that cannot be written (the store is unreachable) change nothing
// and return false. Each request is bounded by the I/O timeout.
func (c *Circuit) CompletePermit(info backend.PermitInfo, o breaker.Outcome) bool {
	c.release()
	if o != breaker.Success && o != breaker.Failure {
		o = breaker.Neutral
	}
	switch {
	case info.Generation == localPermit:
		return c.completeLocal(info, o) // admitted on local evidence (degraded.go)
	case info.Probe:
		return c.completeProbe(info, o)
	}
	return c.completeClosed(info, o)
}

// completeClosed takes the outcome o of a permit the closed circuit issued: a slow
// Success counts as a Failure, a degraded replica keeps the evidence here too, and
// what the shared record must learn is written to it (writeClosed).
func (c *Circuit) completeClosed(info backend.PermitInfo, o breaker.Outcome) bool {
	v := c.view.Load()
	if v == nil || v.rec.State != breaker.Closed || v.rec.Generation != info.Generation || v.rec.Override != breaker.NoOverride {
		return false
	}
	if o == breaker.Success && c.policy.SlowCallDuration > 0 && c.mono()-int64(info.Lease) > int64(c.policy.SlowCallDuration) {
		o = breaker.Failure
	}
	d := c.local.Load()
	if c.cfg.OnStoreFailure == FailClosed {
		d = nil // the evidence refused is dropped; lastErr holds the writes back
	}
	if d != nil && c.counting {
		c.localOutcome(d, o, v.rec.Generation) // the store refuses: keep the evidence here too
	}
	if !c.counting || o == breaker.Neutral || o == breaker.Success && (v.rec.Failures == 0 || v.tripped) {
		return true // healthy traffic reads no clock and writes nothing
	}
	if d != nil && d.writesRefused(c.mono()) {
		return true // counted locally; the store is left alone until RetryDelay ends
	}
	return c.writeClosed(v, o, d)
}

// writeClosed writes a closed-state Success (a reset of the failures) or Failure to
// the store, bounded by the I/O timeout. d is the degraded state the outcome was
// already counted in, or nil; a Failure that is the first write the store refuses
// under KeepLocal is counted in the degraded state it starts.
func (c *Circuit) writeClosed(v *view, o breaker.Outcome, d *degraded) bool {
	if c.backoff() != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.IOTimeout)
	defer cancel()
	defer c.events.Flush()
	var written bool
	if o == breaker.Success {
		written = c.resetFailures(ctx, v)
	} else {
		written = c.addFailure(ctx, v)
	}
	if !written && d == nil && o == breaker.Failure && c.cfg.OnStoreFailure == KeepLocal {
		if nd := c.local.Load(); nd != nil { // this write was the first the store refused
			c.localOutcome(nd, o, v.rec.Generation)
			return true
		}
	}
	return written || d != nil
}

// closedCond is the condition of a Counter update of the closed record r.
func (c *Circuit) closedCond(r Record) Closed {
	return Closed{Generation: r.Generation, Fingerprint: r.Fingerprint, Limit: int64(c.policy.FailureThreshold)}
}

func (c *Circuit) addFailure(ctx context.Context, v *view) bool {
	gen := v.rec.Generation
	if c.counter == nil {
		return c.updateClosed(ctx, v.rec, func(r *Record) bool { r.Failures = addOne(r.Failures); return true })
	}
	at := c.mono() // the snapshot's age counts from the request, as write's does
	r, err := c.counter.AddFailure(ctx, c.cfg.Identity, c.closedCond(v.rec))
	if errors.Is(err, ErrConflict) {
		// The generation moved on, or the count is already at the threshold: read the
		// record to tell which, and open it in the second case.
		nv, err := c.load(ctx)
		if err != nil {
			c.writeFailed(ctx, err)
			return false
		}
		r = nv.rec
	} else if err != nil {
		c.writeFailed(ctx, err)
		return false
	} else {
		c.install(r, at, 0, false)
	}
	if !c.closedIn(r, gen) {
		return false
	}
	c.openIfTripped(ctx, r)
	return true
}

// resetFailures writes the Success that resets the failure count v shows. Only one
// reset per version is sent by this process: the successes that arrive meanwhile
// count on it. A reset that could not be sent is given back, so that the next
// Success sends it.
func (c *Circuit) resetFailures(ctx context.Context, v *view) bool {
	var prev uint64
	for {
		prev = c.resetting.Load()
		if prev >= v.rec.Version {
			return true
		}
		if c.resetting.CompareAndSwap(prev, v.rec.Version) {
			break
		}
	}
	giveBack := func() { c.resetting.CompareAndSwap(v.rec.Version, prev) }
	gen := v.rec.Generation
	if c.counter == nil {
		written := c.updateClosed(ctx, v.rec, func(r *Record) bool {
			if r.Failures == 0 || r.Failures >= int64(c.policy.FailureThreshold) {
				return false
			}
			r.Failures = 0
			return true
		})
		if !written {
			giveBack()
		}
		return written
	}
	at := c.mono()
	r, err := c.counter.ResetFailures(ctx, c.cfg.Identity, c.closedCond(v.rec))
	switch {
	case err == nil:
		c.install(r, at, 0, false)
		return true
	case errors.Is(err, ErrConflict):
		// Already reset by another replica, at the threshold, or a new generation.
		nv, err := c.refresh(ctx, false)
		if err != nil {
			return false
		}
		c.openIfTripped(ctx, nv.rec)
		return c.closedIn(nv.rec, gen)
	}
	giveBack()
	c.writeFailed(ctx, err)
	return false
}

func (c *Circuit) closedIn(r Record, gen uint64) bool {
	return r.State == breaker.Closed && r.Generation == gen && r.Override == breaker.NoOverride
}

// updateClosed applies fn to the closed record r of its generation with a conditional
// replace, reading again after a lost write; a count that reaches the threshold opens
// the circuit in the same write. It reports whether the generation was still live.
func (c *Circuit) updateClosed(ctx context.Context, r Record, fn func(*Record) bool) bool {
	gen := r.Generation
	return c.retryWrite(ctx, r, func(r Record) (Record, bool, bool) {
		if !c.closedIn(r, gen) {
			return r, false, false
		}
		next := r
		if !fn(&next) {
			c.openIfTripped(ctx, r)
			return r, false, true
		}
		if c.counting && next.Failures >= int64(c.policy.FailureThreshold) {
			now := c.wall()
			toOpen(&next, now, now+c.breakFor(0), breaker.ReasonFailureThreshold)
		}
		return next, true, true
	})
}

// retryWrite writes what step makes of r with a conditional replace; when another
// replica changed the record first it reads it again and asks step anew, up to
// maxAttempts. step returns the record to write, whether to write it, and the result
// to report once written (or at once when it writes nothing). A store error is
// reported and gives false; so does a record that kept changing.
func (c *Circuit) retryWrite(ctx context.Context, r Record, step func(Record) (next Record, write, result bool)) bool {
	for range maxAttempts {
		next, write, result := step(r)
		if !write {
			return result
		}
		_, err := c.write(ctx, r, next)
		if err == nil {
			return result
		}
		if !errors.Is(err, ErrConflict) {
			c.writeFailed(ctx, err)
			return false
		}
		nv, err := c.load(ctx)
		if err != nil {
			c.reportError(c.storeFailed(err))
			return false
		}
		r = nv.rec
	}
	return false
}

// openIfTripped writes OPEN over a closed record whose count reached the threshold.
// Nothing but that write (or an operator's override) can change such a record, so
// whichever replica sees it first opens it, and a reached threshold is never lost.
func (c *Circuit) openIfTripped(ctx context.Context, r Record) {
	// On a store error the next Acquire that sees the tripped snapshot writes OPEN again.
	c.retryWrite(ctx, r, func(r Record) (Record, bool, bool) {
		if !c.counting || r.State != breaker.Closed || r.Override != breaker.NoOverride ||
			r.Failures < int64(c.policy.FailureThreshold) {
			return r, false, false
		}
		next, now := r, c.wall()
		toOpen(&next, now, now+c.breakFor(0), breaker.ReasonFailureThreshold)
		return next, true, true
	})
}

func (c *Circuit) completeProbe(info backend.PermitInfo, o breaker.Outcome) bool {
	taken := c.applyProbe(info, o)
	if !taken && o == breaker.Failure {
		taken = c.probeFailedLocally(info) // the store refused the outcome (degraded.go)
	}
	return taken
}

func (c *Circuit) applyProbe(info backend.PermitInfo, o breaker.Outcome) bool {
	return c.updateProbe(info.Generation, info.Lease, func(next *Record, start, now int64) bool {
		if o == breaker.Success && c.policy.SlowCallDuration > 0 && now-start > int64(c.policy.SlowCallDuration) {
			o = breaker.Failure
		}
		switch o {
		case breaker.Success:
			next.Successes = addOne(next.Successes)
			if next.Successes >= int64(c.policy.SuccessesToClose) {
				next.FailedProbes = 0
				toClosed(next, now, breaker.ReasonProbeSucceeded)
			}
		case breaker.Failure:
			next.FailedProbes = addOne(next.FailedProbes)
			toOpen(next, now, now+c.breakFor(next.FailedProbes), breaker.ReasonProbeFailed)
		}
		return true
	})
}

// updateProbe removes lease id from the half-open record of generation gen, lets fn
// apply the probe's outcome to the record written (fn gets the probe's start and the
// time), and writes it conditionally. It reports fn's answer, or false when the lease
// is gone or expired (its outcome changes nothing) or the write failed.
func (c *Circuit) updateProbe(gen, id uint64, fn func(next *Record, start, now int64) bool) bool {
	if c.backoff() != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.IOTimeout)
	defer cancel()
	defer c.events.Flush()
	v := c.view.Load()
	if v != nil && v.rec.Generation > gen {
		return false // the circuit moved on since this probe was admitted
	}
	if v == nil || v.rec.State != breaker.HalfOpen || v.rec.Generation != gen {
		var err error
		if v, err = c.load(ctx); err != nil {
			c.reportError(c.storeFailed(err))
			return false
		}
	}
	// Try the snapshot's version first; a lost write reads the record.
	return c.retryWrite(ctx, v.rec, func(r Record) (Record, bool, bool) {
		if r.State != breaker.HalfOpen || r.Generation != gen {
			return r, false, false
		}
		i := slices.IndexFunc(r.Leases, func(l Lease) bool { return l.ID == id })
		now := c.wall()
		if i < 0 || now >= r.Leases[i].Expires {
			return r, false, false // the lease expired, and may have been taken over
		}
		next := r
		next.Leases = slices.Delete(slices.Clone(r.Leases), i, i+1)
		live := fn(&next, r.Leases[i].Expires-int64(c.policy.ProbeLease), now)
		return next, true, live
	})
}

// ForceOpen holds the shared circuit open until the given time on every replica:
// calls are rejected and outcomes change nothing. Replicas see it within
// MaxStaleness. When the hold ends the next Acquire is a half-open probe.
func (c *Circuit) ForceOpen(ctx context.Context, until time.Time) error {
	if err := c.checkHold(until); err != nil {
		return err
	}
	return c.override(ctx, forceOpen(until))
}

// ForceClose holds the shared circuit closed until the given time on every replica:
// calls are admitted (MaxInFlight still applies) and outcomes change nothing. When
// the hold ends the circuit is closed with no failure evidence.
func (c *Circuit) ForceClose(ctx context.Context, until time.Time) error {
	if err := c.checkHold(until); err != nil {
		return err
	}
	return c.override(ctx, forceClose(until))
}

// ClearOverride ends a ForceOpen or ForceClose now, as if its deadline had passed: a
// cleared ForceOpen admits a probe next, a cleared ForceClose is closed with no
// failure evidence. Without an override it writes nothing.
func (c *Circuit) ClearOverride(ctx context.Context) error {
	return c.override(ctx, clearOverride)
}

// override applies h to the record (see overrideRecord), checking it and its policy
// as every read does, and makes the result the snapshot.
func (c *Circuit) override(ctx context.Context, h hold) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.IOTimeout)
	defer cancel()
	defer c.events.Flush()
	load := func() (Record, error) {
		v, err := c.load(ctx)
		if err != nil {
			return Record{}, err
		}
		return v.rec, nil
	}
	replace := func(prev, next Record) error {
		_, err := c.write(ctx, prev, next)
		return err
	}
	if _, err := overrideRecord(load, replace, c.wall, h); err != nil {
		return c.unavailable(err)
	}
	return nil
}

// addOne returns n+1, or n at the int64 maximum: a stored count that high (written by
// hand or by someone with access to the store) must not wrap into a negative count,
// which Record.Check refuses, so that every replica would refuse the record the engine
// itself wrote.
func addOne(n int64) int64 {
	if n == math.MaxInt64 {
		return n
	}
	return n + 1
}
