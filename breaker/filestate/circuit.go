package filestate

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// Circuit is one circuit whose state lives in a file of its Store's root, shared by
// every process that opens the same root and identity. It implements breaker.Circuit
// and is safe for concurrent use. Get it from Store.Circuit.
type Circuit struct {
	store       *Store
	identity    string
	policy      breaker.Policy // normalized
	fingerprint string
	name        string // hex SHA-256 of the identity
	statePath   string
	lockPath    string

	// view is the last record this process read or wrote. A fresh closed view admits
	// calls, and a fresh open view rejects them, without touching the file.
	view     atomic.Pointer[view]
	inFlight atomic.Int64 // admitted, uncompleted permits of this process; counted only when MaxInFlight > 0

	// mu serializes this process's file work on the circuit and the views it stores,
	// so that a later view is never replaced by an earlier one. It is taken before the
	// file lock.
	mu sync.Mutex
}

var (
	_ breaker.Circuit   = (*Circuit)(nil)
	_ breaker.Completer = (*Circuit)(nil)
)

// view is an immutable snapshot of the record and what it decides. Its times are
// Store.mono readings, private to this process.
type view struct {
	rec      record
	loadedAt int64 // when it was read or written
	// rejectUntil and reject: until rejectUntil, Acquire returns reject.
	rejectUntil int64
	reject      *breaker.OpenError
}

// Identity returns the circuit's name.
func (c *Circuit) Identity() string { return c.identity }

// Policy returns the circuit's policy with defaults written out.
func (c *Circuit) Policy() breaker.Policy { return c.policy }

// fresh reports whether v may decide an Acquire at m (a mono reading). A fake clock
// set backwards makes every view stale rather than fresh forever.
func (c *Circuit) fresh(v *view, m int64) bool {
	age := m - v.loadedAt
	return age >= 0 && age < c.store.staleness
}

// Acquire asks to make one call. A fresh snapshot of a closed circuit admits the call
// without any file access; otherwise the state file is read, and changed under its
// lock when a transition is due (an open circuit whose break ended admits one process's
// probe). A rejection is an *breaker.OpenError (errors.Is breaker.ErrOpen) or
// breaker.ErrSaturated; a state file that cannot be read, is corrupt or belongs to
// another policy fails with an error matching breaker.ErrUnavailable, and no call is
// admitted. A context that has already ended returns its error and changes nothing.
func (c *Circuit) Acquire(ctx context.Context) (breaker.Permit, error) {
	if err := ctx.Err(); err != nil {
		return breaker.Permit{}, err
	}
	m := c.store.mono()
	if v := c.view.Load(); v != nil && c.fresh(v, m) {
		if v.rec.State == stateClosed {
			return c.admit(v.rec.Generation)
		}
		if m < v.rejectUntil {
			return breaker.Permit{}, v.reject
		}
	}
	return c.acquireSlow()
}

// admit hands out a closed-state permit of generation gen, after taking an in-flight
// slot when the policy bounds them. Lease carries the start time when calls are timed.
func (c *Circuit) admit(gen uint64) (breaker.Permit, error) {
	if !c.takeSlot() {
		return breaker.Permit{}, breaker.ErrSaturated
	}
	info := breaker.PermitInfo{Generation: gen}
	if c.policy.SlowCallDuration > 0 {
		info.Lease = uint64(c.store.mono())
	}
	return breaker.NewPermit(c, info), nil
}

func (c *Circuit) takeSlot() bool {
	limit := int64(c.policy.MaxInFlight)
	if limit == 0 {
		return true
	}
	if c.inFlight.Add(1) > limit {
		c.inFlight.Add(-1)
		return false
	}
	return true
}

func (c *Circuit) releaseSlot() {
	if c.policy.MaxInFlight > 0 {
		c.inFlight.Add(-1)
	}
}

func (c *Circuit) acquireSlow() (breaker.Permit, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, now := c.store.mono(), c.store.now()
	// Another goroutine may have refreshed the view while this one waited.
	if v := c.view.Load(); v != nil && c.fresh(v, m) {
		if v.rec.State == stateClosed {
			return c.admit(v.rec.Generation)
		}
		if m < v.rejectUntil {
			return breaker.Permit{}, v.reject
		}
	}
	// Most refreshes need no transition, and so no lock: records are replaced whole.
	r, err := c.read()
	if err != nil {
		c.view.Store(nil)
		return breaker.Permit{}, err
	}
	if r != nil {
		v := c.setView(r, m, now, nil)
		if r.State == stateClosed {
			return c.admit(r.Generation)
		}
		if m < v.rejectUntil {
			return breaker.Permit{}, v.reject
		}
	}
	// The record is missing, its break is over, or it is half-open: lock and decide.
	var (
		permit breaker.Permit
		reject error
	)
	// The decision uses the time read once the lock is held: waiting for another
	// process must not make a lease or a break look longer than it is.
	lm, lnow, err := c.update(func(r *record, created bool, now int64) (write bool) {
		switch r.State {
		case stateClosed:
			permit, reject = c.admit(r.Generation)
			return created
		case stateOpen:
			if now < r.OpenUntil { // another process reopened it meanwhile
				reject = c.openError(r.OpenUntil)
				return false
			}
			r.toHalfOpen()
			write = true
		}
		if r.reclaim(now) {
			write = true
		}
		if len(r.Probes) >= c.policy.HalfOpenMaxProbes {
			// Come back after the retry delay, and not before a slot can free up.
			earliest := r.Probes[0].Expires
			for _, p := range r.Probes[1:] {
				earliest = min(earliest, p.Expires)
			}
			reject = c.openError(max(now+int64(c.policy.HalfOpenRetryDelay), earliest))
			return write
		}
		if !c.takeSlot() {
			reject = breaker.ErrSaturated
			return write
		}
		lease := r.NextLease
		r.NextLease++
		r.Probes = append(r.Probes, probeLease{Lease: lease, Expires: now + int64(c.policy.ProbeLease)})
		permit = breaker.NewPermit(c, breaker.PermitInfo{Generation: r.Generation, Probe: true, Lease: lease})
		return true
	})
	if err != nil {
		if permit.Probe() || permit.Generation() != 0 {
			// The permit was never handed out; give back its slot.
			c.releaseSlot()
		}
		return breaker.Permit{}, err
	}
	if oe, ok := reject.(*breaker.OpenError); ok {
		// Serve one rejection to this process's callers until it runs out (an open
		// record's view already carries its own).
		if v := c.view.Load(); v != nil && v.rec.State == stateHalfOpen {
			c.setView(&v.rec, lm, lnow, oe)
		}
	}
	return permit, reject
}

func (c *Circuit) openError(notBefore int64) *breaker.OpenError {
	return breaker.NewOpenError(c.identity, breaker.SingleHost, time.Unix(0, notBefore))
}

// setView stores the view of r read or written at m (mono) and now (wall). A given
// rejection is served until its NotBefore; an open record's own rejection (reusing
// the previous view's for the same generation) until its deadline. Requires c.mu held.
func (c *Circuit) setView(r *record, m, now int64, reject *breaker.OpenError) *view {
	v := &view{rec: *r, loadedAt: m, reject: reject}
	if reject != nil {
		v.rejectUntil = m + (reject.NotBefore.UnixNano() - now)
	}
	if reject == nil && r.State == stateOpen {
		v.rejectUntil = m + (r.OpenUntil - now)
		if old := c.view.Load(); old != nil && old.rec.Generation == r.Generation && old.rec.State == stateOpen && old.reject != nil {
			v.reject = old.reject
		} else {
			v.reject = c.openError(r.OpenUntil)
		}
	}
	c.view.Store(v)
	return v
}

// read reads the record without the file lock and checks it against this circuit.
// A missing record is (nil, nil).
func (c *Circuit) read() (*record, error) {
	r, err := readState(c.identity, c.statePath)
	if err != nil || r == nil {
		return nil, err
	}
	if r.Fingerprint != c.fingerprint {
		return nil, &PolicyMismatchError{Identity: c.identity, Stored: r.Fingerprint, Policy: c.fingerprint}
	}
	if err := r.checkPolicy(c.policy); err != nil {
		return nil, &StateError{Identity: c.identity, Path: c.statePath, Op: "read", Err: err}
	}
	return r, nil
}

// update runs fn on the current record under the file lock and writes the record back
// when fn asks. The clock is read once the lock is held, so that a wait for it never
// lets fn decide on an earlier time (a probe whose lease ran out meanwhile would
// count); fn gets that wall time, and update returns the mono and wall readings the
// view was stored with. A missing record is started closed, with created set; it is
// written only if fn asks. The view is refreshed from whatever the file holds
// afterwards. Requires c.mu held.
func (c *Circuit) update(fn func(r *record, created bool, now int64) (write bool)) (m, now int64, err error) {
	unlock, err := lockFile(c.identity, c.lockPath)
	if err != nil {
		c.view.Store(nil)
		return 0, 0, err
	}
	defer unlock()
	m, now = c.store.mono(), c.store.now()
	r, err := c.read()
	if err != nil {
		c.view.Store(nil)
		return m, now, err
	}
	created := r == nil
	if created {
		r = c.newRecord(now)
	}
	if !fn(r, created, now) {
		if created {
			c.view.Store(nil)
		} else {
			c.setView(r, m, now, nil)
		}
		return m, now, nil
	}
	if err := writeState(c.identity, c.store.root, c.name, c.statePath, r); err != nil {
		c.view.Store(nil)
		return m, now, err
	}
	c.setView(r, m, now, nil)
	return m, now, nil
}

// newRecord starts a closed circuit. Its first generation is read from the clock, so
// that permits issued before a Clear cannot match the record that replaces it.
func (c *Circuit) newRecord(now int64) *record {
	return &record{
		Version:     recordVersion,
		Identity:    c.identity,
		Fingerprint: c.fingerprint,
		State:       stateClosed,
		Generation:  uint64(max(now, 1)),
		NextLease:   1,
	}
}

// CompletePermit takes the outcome of one of this circuit's permits; Permit.Complete
// calls it once per permit. It reports whether the permit was live: of the generation
// the file holds now and, for a probe, within its lease. A success on a closed circuit
// whose snapshot shows no failures, and any Neutral outcome of a closed-state permit,
// are decided on the snapshot without file access; failures, probe outcomes and the
// success that resets a failure count are written under the lock.
func (c *Circuit) CompletePermit(info breaker.PermitInfo, o breaker.Outcome) bool {
	c.releaseSlot()
	if o != breaker.Success && o != breaker.Failure {
		o = breaker.Neutral
	}
	if info.Probe {
		return c.completeProbe(info, o)
	}
	if o == breaker.Success && c.policy.SlowCallDuration > 0 {
		if time.Duration(c.store.mono()-int64(info.Lease)) > c.policy.SlowCallDuration {
			o = breaker.Failure
		}
	}
	if o != breaker.Failure || !c.policy.Enabled() {
		if v := c.view.Load(); v == nil || v.rec.Generation != info.Generation {
			return false
		} else if o == breaker.Neutral || !c.policy.Enabled() || v.rec.Failures == 0 {
			return true
		}
	}
	return c.completeClosed(info.Generation, o == breaker.Failure)
}

// completeClosed records a closed-state Failure, or the Success that resets the
// failure count, under the lock.
func (c *Circuit) completeClosed(gen uint64, failure bool) bool {
	c.mu.Lock()
	// Another success may have reset the count while this one waited.
	if v := c.view.Load(); !failure && v != nil && v.rec.Generation == gen && v.rec.Failures == 0 {
		c.mu.Unlock()
		return true
	}
	live := false
	_, _, err := c.update(func(r *record, _ bool, now int64) bool {
		if r.State != stateClosed || r.Generation != gen {
			return false
		}
		live = true
		if !failure {
			if r.Failures == 0 {
				return false
			}
			r.Failures = 0
			return true
		}
		r.Failures++
		if r.Failures >= int64(c.policy.FailureThreshold) {
			r.toOpen(now + c.breakFor(0))
		}
		return true
	})
	c.mu.Unlock()
	return c.settled(live, err)
}

func (c *Circuit) completeProbe(info breaker.PermitInfo, o breaker.Outcome) bool {
	c.mu.Lock()
	live := false
	_, _, err := c.update(func(r *record, _ bool, now int64) bool {
		if r.State != stateHalfOpen || r.Generation != info.Generation {
			return false
		}
		i := -1
		for j, p := range r.Probes {
			if p.Lease == info.Lease {
				i = j
				break
			}
		}
		if i < 0 { // its lease was reclaimed by another caller
			return false
		}
		expires := r.Probes[i].Expires
		r.Probes = append(r.Probes[:i], r.Probes[i+1:]...)
		if now >= expires {
			return true // the slot is freed; the late outcome changes nothing
		}
		live = true
		start := expires - int64(c.policy.ProbeLease)
		if o == breaker.Success && c.policy.SlowCallDuration > 0 && now-start > int64(c.policy.SlowCallDuration) {
			o = breaker.Failure
		}
		switch o {
		case breaker.Success:
			r.Successes++
			if r.Successes >= c.policy.SuccessesToClose {
				r.toClosed()
			}
		case breaker.Failure:
			r.FailedProbes++
			r.toOpen(now + c.breakFor(r.FailedProbes))
		}
		return true
	})
	c.mu.Unlock()
	return c.settled(live, err)
}

// settled reports a completion's write error to the handler, outside the locks. An
// outcome that could not be written was not taken into account.
func (c *Circuit) settled(live bool, err error) bool {
	if err != nil {
		if h := c.store.onError; h != nil {
			h(err)
		}
		return false
	}
	return live
}

// breakFor is Policy.BreakAfter in nanoseconds.
func (c *Circuit) breakFor(failedProbes int) int64 {
	return int64(c.policy.BreakAfter(failedProbes, c.store.random))
}

// Snapshot returns the circuit as this process last saw it, reading the state file
// when that view is older than the staleness bound. It cannot report an error: when
// the file cannot be read it returns the last view it had (a closed circuit of
// generation 0 if none), and Acquire reports the error.
func (c *Circuit) Snapshot() breaker.Snapshot {
	m, now := c.store.mono(), c.store.now()
	v := c.view.Load()
	if v == nil || !c.fresh(v, m) {
		c.mu.Lock()
		if r, err := c.read(); err == nil && r != nil {
			v = c.setView(r, m, now, nil)
		}
		c.mu.Unlock()
	}
	s := breaker.Snapshot{Identity: c.identity, Scope: breaker.SingleHost}
	if c.policy.MaxInFlight > 0 {
		s.InFlight = int(c.inFlight.Load())
	}
	if v == nil {
		return s
	}
	s.State, s.Generation, s.Failures = v.rec.brokerState(), v.rec.Generation, int(v.rec.Failures)
	switch v.rec.State {
	case stateOpen:
		s.NotBefore = time.Unix(0, v.rec.OpenUntil)
	case stateHalfOpen:
		s.Probes = v.rec.liveProbes(now)
	}
	return s
}
