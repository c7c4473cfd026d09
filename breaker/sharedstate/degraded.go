package sharedstate

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// StoreFailure says what a shared circuit does with evidence its store will not
// record: a write refused (Redis OOM, READONLY or MISCONF; a DynamoDB throttle or an
// item that cannot be written) or lost (the store unreachable).
type StoreFailure int

const (
	// KeepLocal (the default) keeps the evidence the store refused in this replica:
	// its failures count towards the threshold here, and at the threshold this
	// replica opens for itself (a local break, then one local probe at a time, with
	// the policy's backoff), while the shared record goes on deciding what it still
	// can. The circuit reports itself degraded (Snapshot.DegradedSince) meanwhile.
	// Reads go on, so an OPEN another replica manages to write still holds here. A
	// fleet of N replicas then lets at most N × FailureThreshold failing calls (and a
	// probe per replica per break) reach a dead broker while the store refuses
	// writes, where it lets one threshold through when the store is healthy.
	KeepLocal StoreFailure = iota
	// FailClosed refuses every call (unless the shared record says open) for
	// RetryDelay after each write the store refused, with an error matching
	// breaker.ErrUnavailable, and, as under KeepLocal, every call once the snapshot is
	// stale and the store cannot be read: nothing is decided on evidence the fleet
	// does not share, at the price of refusing calls a healthy broker would serve.
	// The evidence refused is dropped.
	FailClosed
)

// Reasons of the transitions a degraded replica makes on local evidence. Its
// observers see them with the shared record's generation.
const (
	ReasonLocalThreshold   = "local_failure_threshold" // the store refused failures; they reached the threshold here
	ReasonLocalProbeFailed = "local_probe_failed"      // a local probe failed; the local break starts again
	ReasonLocalRecovered   = "local_probe_succeeded"   // a local probe succeeded; the local evidence is spent
)

// degraded is a replica's evidence that its store refused to record, and the local
// circuit that evidence drives. It exists only while the store refuses (Circuit.local
// is nil otherwise, so the healthy path pays one atomic load for it).
type degraded struct {
	mu           sync.Mutex
	since        int64 // wall: the first refusal
	cause        error // the last refusal
	writeAfter   int64 // mono: no write to the store is tried before then
	failures     int64 // consecutive failures since the first refusal
	openUntil    int64 // mono: locally open until then; 0 while closed locally
	openWall     int64 // the same deadline in wall time, for OpenError and Snapshot
	failedProbes int64
	probing      bool // a local probe is in flight
	reject       *breaker.OpenError
}

// localPermit marks the permits a degraded replica admits on local evidence alone:
// no shared generation is 0, so CompletePermit tells them apart.
const localPermit = 0

// testHookRefused, when set (by a test only), runs in refused between finding no
// degraded state and creating one: the window in which two callers' first refusals
// race. nil in production.
var testHookRefused func()

// refused records that the store would not take a write (err; a conflict or a
// caller's cancellation is no refusal), and reports whether the evidence is kept
// locally: under KeepLocal. Under FailClosed the caller goes on as before.
func (c *Circuit) refused(ctx context.Context, err error) (*degraded, bool) {
	if !c.counting || errors.Is(err, ErrConflict) ||
		errors.Is(err, ErrCorrupt) || errors.Is(err, ErrPolicyMismatch) || ctx.Err() != nil {
		return nil, false
	}
	d := c.local.Load()
	if d == nil {
		if testHookRefused != nil {
			testHookRefused() // tests: another caller's first refusal comes in between
		}
		nd := &degraded{since: c.wall()}
		if c.local.CompareAndSwap(nil, nd) {
			d = nd
		} else {
			d = c.local.Load()
		}
	}
	d.mu.Lock()
	d.cause = c.unavailable(err)
	d.writeAfter = c.mono() + max(int64(c.cfg.RetryDelay), 0)
	d.mu.Unlock()
	if c.cfg.OnStoreFailure == FailClosed {
		return d, false // refuses calls until RetryDelay ends (acquireDegraded)
	}
	c.reportError(d.cause)
	return d, true
}

// writesRefused reports whether a write should wait: the store refused one within
// RetryDelay.
func (d *degraded) writesRefused(m int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return m < d.writeAfter
}

// localOutcome applies the outcome of a call to the local evidence. A failure that
// reaches the threshold opens the replica locally; a success resets the count.
func (c *Circuit) localOutcome(d *degraded, o breaker.Outcome, gen uint64) {
	if o == breaker.Neutral {
		return
	}
	d.mu.Lock()
	if o == breaker.Success {
		d.failures = 0
		d.mu.Unlock()
		return
	}
	d.failures = addOne(d.failures)
	trip := d.openUntil == 0 && !d.probing && d.failures >= int64(c.policy.FailureThreshold)
	if trip {
		c.openLocally(d, 0)
	}
	d.mu.Unlock()
	if trip {
		c.localTransition(breaker.Closed, breaker.Open, gen, ReasonLocalThreshold)
	}
}

// openLocally starts a local break after failedProbes failed probes. Requires d.mu.
func (c *Circuit) openLocally(d *degraded, failedProbes int64) {
	d.failedProbes = failedProbes
	span := c.breakFor(failedProbes)
	d.openUntil, d.openWall = c.mono()+span, c.wall()+span
	d.reject = backend.NewOpenError(c.cfg.Identity, c.cfg.Scope, time.Unix(0, d.openWall))
}

func (c *Circuit) localTransition(from, to breaker.State, gen uint64, reason string) {
	c.events.Push(breaker.Transition{Identity: c.cfg.Identity, From: from, To: to, Generation: gen,
		At: time.Unix(0, c.wall()), Reason: reason})
	c.events.Flush()
}

// acquireDegraded decides a call on the local evidence of d, when that evidence has
// a say: the replica is open locally (rejected), its break is over (one local
// probe), or the shared record needs a write the store refuses (admitted on local
// evidence). decided is false when the shared snapshot decides as usual. Evidence
// that is spent (closed locally, no failures) after RetryDelay without a refusal
// ends the degraded state.
func (c *Circuit) acquireDegraded(ctx context.Context, d *degraded, v *view, m int64) (p breaker.Permit, err error, decided bool) {
	if c.cfg.OnStoreFailure == FailClosed {
		return c.acquireFailClosed(d, v, m)
	}
	d.mu.Lock()
	if d.openUntil != 0 && m < d.openUntil {
		defer d.mu.Unlock()
		return breaker.Permit{}, d.reject, true // open here: no I/O
	}
	d.mu.Unlock()
	// What the shared record says comes first: read it when the snapshot is old
	// (reads go on while writes are refused), and let an open record decide.
	if v == nil || m-v.at < 0 || m-v.at >= c.refreshAfter {
		if nv, _ := c.refresh(ctx, true); nv != nil {
			v, m = nv, c.mono()
		}
	}
	if v != nil && m < v.rejectUntil {
		return breaker.Permit{}, nil, false
	}
	d.mu.Lock()
	if v != nil && v.tripped && d.openUntil == 0 && !d.probing && m < d.writeAfter {
		// The fleet reached the threshold, and the OPEN that should follow waits for
		// the store: open here.
		d.mu.Unlock()
		p, err = c.openRefused(d, v)
		return p, err, true
	}
	defer d.mu.Unlock()
	return c.decideLocally(d, v, m)
}

// acquireFailClosed is acquireDegraded under FailClosed: until RetryDelay ends,
// every call the shared snapshot does not already refuse gets the store's error,
// since nothing may be decided on evidence the store refused; then the store is
// tried again.
func (c *Circuit) acquireFailClosed(d *degraded, v *view, m int64) (breaker.Permit, error, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m < d.writeAfter && (v == nil || m >= v.rejectUntil) {
		return breaker.Permit{}, d.cause, true
	}
	if m >= d.writeAfter {
		c.local.CompareAndSwap(d, nil) // try the store again
	}
	return breaker.Permit{}, nil, false
}

// decideLocally is the part of acquireDegraded that d's own evidence decides: a
// local break and its probe, spent evidence, and calls the shared record cannot take
// because the write it waits for is refused. Requires d.mu held.
func (c *Circuit) decideLocally(d *degraded, v *view, m int64) (breaker.Permit, error, bool) {
	switch {
	case d.openUntil != 0 && m < d.openUntil:
		return breaker.Permit{}, d.reject, true
	case d.openUntil != 0 || d.probing:
		return c.localProbe(d)
	case d.failures == 0 && m >= d.writeAfter:
		c.local.CompareAndSwap(d, nil) // spent: the store is trusted again
		return breaker.Permit{}, nil, false
	case v != nil && m < v.rejectUntil:
		return breaker.Permit{}, nil, false // the shared record says open: it decides
	case v != nil && v.rec.State != breaker.Closed || v != nil && v.tripped:
		// The shared record waits for a write (HALF-OPEN, OPEN) that the store refuses.
		if m >= d.writeAfter {
			return breaker.Permit{}, nil, false // try the store again
		}
		if !c.reserve() {
			return breaker.Permit{}, breaker.ErrSaturated, true
		}
		return backend.NewPermit(c, backend.PermitInfo{Generation: localPermit}), nil, true
	}
	return breaker.Permit{}, nil, false
}

// localProbe admits the one probe of a local break that has ended, or refuses a call
// while that probe is out. Requires d.mu held.
func (c *Circuit) localProbe(d *degraded) (breaker.Permit, error, bool) {
	if d.probing {
		return breaker.Permit{}, backend.NewOpenError(c.cfg.Identity, c.cfg.Scope,
			time.Unix(0, c.wall()+int64(c.policy.HalfOpenRetryDelay))), true
	}
	if !c.reserve() {
		return breaker.Permit{}, breaker.ErrSaturated, true
	}
	d.probing = true
	return backend.NewPermit(c, backend.PermitInfo{Generation: localPermit, Probe: true}), nil, true
}

// completeLocal records the outcome of a permit admitted on local evidence alone.
func (c *Circuit) completeLocal(info backend.PermitInfo, o breaker.Outcome) bool {
	d := c.local.Load()
	if d == nil {
		return false
	}
	gen := uint64(0)
	if v := c.view.Load(); v != nil {
		gen = v.rec.Generation
	}
	if !info.Probe {
		c.localOutcome(d, o, gen)
		return o != breaker.Neutral
	}
	d.mu.Lock()
	d.probing = false
	var from, to breaker.State
	reason := ""
	switch o {
	case breaker.Success:
		d.failures, d.failedProbes, d.openUntil, d.openWall, d.reject = 0, 0, 0, 0, nil
		from, to, reason = breaker.HalfOpen, breaker.Closed, ReasonLocalRecovered
	case breaker.Failure:
		c.openLocally(d, addOne(d.failedProbes))
		from, to, reason = breaker.HalfOpen, breaker.Open, ReasonLocalProbeFailed
	}
	d.mu.Unlock()
	if reason != "" {
		c.localTransition(from, to, gen, reason)
	}
	return o != breaker.Neutral
}

// degradedSnapshot lays the local evidence over s, the shared record's view.
func (c *Circuit) degradedSnapshot(s *breaker.Snapshot) {
	d := c.local.Load()
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s.DegradedSince = time.Unix(0, d.since)
	// A shared break still running says more than the local evidence; one that is over
	// (the store refused the HALF-OPEN) says less.
	sharedOpen := s.State == breaker.Open && s.NotBefore.UnixNano() > c.wall()
	switch {
	case d.probing && !sharedOpen:
		s.State, s.Probes, s.NotBefore = breaker.HalfOpen, 1, time.Time{}
	case d.openUntil != 0 && (!sharedOpen || d.openWall > s.NotBefore.UnixNano()):
		s.State, s.NotBefore = breaker.Open, time.Unix(0, d.openWall)
	}
	s.Failures = max(s.Failures, int(min(d.failures, int64(int(^uint(0)>>1)))))
}

// writeFailed handles a write (or the read that follows a lost one) that failed with
// err: kept as a refusal under KeepLocal, else reported and waited out (RetryDelay).
func (c *Circuit) writeFailed(ctx context.Context, err error) {
	if _, ok := c.refused(ctx, err); !ok {
		c.reportError(c.storeFailed(err))
	}
}

// openRefused answers a call that found the shared record closed but needing a
// write the store refused: at the threshold (tripped), this replica opens locally;
// after a ForceClose ended, it admits on local evidence.
func (c *Circuit) openRefused(d *degraded, v *view) (breaker.Permit, error) {
	if !v.tripped {
		if !c.reserve() {
			return breaker.Permit{}, breaker.ErrSaturated
		}
		return backend.NewPermit(c, backend.PermitInfo{Generation: localPermit}), nil
	}
	d.mu.Lock()
	opened := d.openUntil == 0 && !d.probing
	if opened {
		d.failures = max(d.failures, int64(c.policy.FailureThreshold))
		c.openLocally(d, 0)
	}
	reject := d.reject
	d.mu.Unlock()
	if opened {
		c.localTransition(breaker.Closed, breaker.Open, v.rec.Generation, ReasonLocalThreshold)
	}
	if reject == nil {
		return breaker.Permit{}, backend.NewOpenError(c.cfg.Identity, c.cfg.Scope, time.Unix(0, c.wall()+int64(c.policy.HalfOpenRetryDelay)))
	}
	return breaker.Permit{}, reject
}

// probeLocally answers a call that would have taken a shared probe lease the store
// refused to write: this replica probes for itself, one call at a time, with the
// backoff of the record's failed probes.
func (c *Circuit) probeLocally(d *degraded, failedProbes int64) (breaker.Permit, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.probing || d.openUntil != 0 && c.mono() < d.openUntil {
		if d.reject != nil && !d.probing {
			return breaker.Permit{}, d.reject
		}
		return breaker.Permit{}, backend.NewOpenError(c.cfg.Identity, c.cfg.Scope, time.Unix(0, c.wall()+int64(c.policy.HalfOpenRetryDelay)))
	}
	if !c.reserve() {
		return breaker.Permit{}, breaker.ErrSaturated
	}
	d.probing, d.failedProbes = true, max(d.failedProbes, failedProbes)
	return backend.NewPermit(c, backend.PermitInfo{Generation: localPermit, Probe: true}), nil
}

// probeFailedLocally keeps a shared probe's failure that the store would not record:
// this replica opens locally with the backoff of one more failed probe.
func (c *Circuit) probeFailedLocally(info backend.PermitInfo) bool {
	d := c.local.Load()
	if d == nil || c.cfg.OnStoreFailure == FailClosed {
		return false
	}
	d.mu.Lock()
	opened := d.openUntil == 0 && !d.probing
	if opened {
		failed := d.failedProbes
		if v := c.view.Load(); v != nil {
			failed = max(failed, v.rec.FailedProbes)
		}
		c.openLocally(d, addOne(failed))
	}
	d.mu.Unlock()
	if opened {
		c.localTransition(breaker.HalfOpen, breaker.Open, info.Generation, ReasonLocalProbeFailed)
	}
	return opened
}
