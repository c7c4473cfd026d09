package sharedstate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/internal/eventq"
)

// Defaults of Config.
const (
	DefaultMaxStaleness = time.Second
	DefaultRetryDelay   = time.Second
	DefaultIOTimeout    = 2 * time.Second
)

// maxAttempts bounds the conditional writes one decision makes before it gives up to
// concurrent writers.
const maxAttempts = 8

// Config describes one shared circuit to New. Identity, Policy, Scope and Driver are
// required; the rest have defaults.
type Config struct {
	Identity string
	Policy   breaker.Policy
	// Scope is the scope the backend provides; a policy of another scope is refused.
	Scope  breaker.Scope
	Driver Driver
	// Clock tells the time (default: the system clock, whose monotonic reading ages
	// snapshots). Replicas write deadlines from their own clocks, so their clocks must
	// agree to well within BreakDuration and ProbeLease.
	Clock  breaker.Clock
	Random func() float64 // jitter source, safe for concurrent use (default math/rand/v2.Float64)
	Owner  string         // written into this replica's probe leases (default host/pid/random)
	// MaxStaleness is how old the local snapshot may be and still decide an Acquire
	// (0 means one second; a negative value reads the record on every Acquire). One
	// caller refreshes it once it is three quarters stale, while the others keep
	// using it.
	MaxStaleness time.Duration
	// RetryDelay is how long a failed request to the store keeps the circuit from
	// trying again (0 means one second; a negative value retries at once); calls that
	// need the store meanwhile fail at once.
	RetryDelay time.Duration
	// IOTimeout bounds each request to the store (0 means two seconds).
	IOTimeout time.Duration
	// Observers are called after every transition this replica writes or learns of,
	// outside any lock and in generation order.
	Observers []func(breaker.Transition)
	// Unavailable turns the cause of a refusal into the error Acquire returns; it
	// must match breaker.ErrUnavailable. Default: an *UnavailableError.
	Unavailable func(error) error
	// OnError is told the errors Permit.Complete cannot return: an outcome or
	// transition that could not be written.
	OnError func(error)
	// OnStoreFailure says what happens to evidence the store refuses to record
	// (degraded.go): KeepLocal (the default) or FailClosed.
	OnStoreFailure StoreFailure
}

// Circuit is a circuit breaker whose state is one Record in a Driver's store, shared
// by every replica that uses the same store and identity. It is safe for concurrent
// use and starts no goroutine.
type Circuit struct {
	cfg         Config
	policy      breaker.Policy // normalized
	fingerprint string
	description string
	// legacyFingerprint is breaker.Policy.Fingerprint, which records written before
	// this engine carry. It is accepted (and kept) so that a rolling upgrade does not
	// refuse the existing records; records this engine creates carry fingerprint.
	legacyFingerprint string
	counting          bool
	counter           Counter // the driver's, or nil
	refreshAfter      int64   // snapshot age at which one caller refreshes it
	staleness         int64
	epoch             time.Time
	systemClock       bool

	view     atomic.Pointer[view] // the last state read or written; nil before the first
	installs atomic.Uint64        // views installed, from reads and writes
	inFlight atomic.Int64         // admitted, uncompleted permits (when MaxInFlight > 0)
	// rampRefused counts the calls this replica's ramps turned away.
	rampRefused atomic.Uint64
	// resetting is the Version whose failure count a Success is resetting, so that a
	// burst of successes sends one reset, not one each.
	resetting atomic.Uint64

	mu      sync.Mutex // guards the fields below and orders view installs
	loading *loadCall  // the read in flight, which other callers join
	lastErr error      // the last failure to reach or use the store, until retryAt
	retryAt int64      // mono

	lastFailure atomic.Pointer[failureNote] // the last failure completed with its error (health.go)

	events eventq.Queue[breaker.Transition]

	// local is the evidence the store refused, while it refuses (degraded.go).
	local atomic.Pointer[degraded]
}

// view is an immutable local copy of the record and what it decides.
type view struct {
	rec Record
	at  int64 // mono reading when it was read or written
	// admitUntil (mono): a closed view admits until then (the ForceClose deadline,
	// or forever); 0 for a view that does not admit.
	admitUntil int64
	// rejectUntil (mono): an open view rejects with reject until then.
	rejectUntil int64
	reject      *breaker.OpenError
	tripped     bool // closed with failures at the threshold: the next decision opens it
	// ramp paces a closed generation that began with a probe's success, from
	// rampStart until rampEnd (mono, from the record's Since): every replica reads
	// the same close time, so the fleet ramps together.
	ramp               *backend.Ramp
	rampStart, rampEnd int64
}

type loadCall struct {
	done chan struct{}
	v    *view
	err  error
}

var (
	_ breaker.Circuit   = (*Circuit)(nil)
	_ backend.Completer = (*Circuit)(nil)
)

// New returns the shared circuit cfg describes, or an error naming what is wrong. It
// does no I/O: the first Acquire (or Refresh) reads the record, creating it when it
// is missing. The policy must count consecutive failures and enforce.
func New(cfg Config) (*Circuit, error) {
	p := cfg.Policy
	fail := func(err error) (*Circuit, error) {
		return nil, fmt.Errorf("sharedstate: circuit %q: %w", cfg.Identity, err)
	}
	if err := p.Validate(); err != nil {
		return fail(err)
	}
	switch {
	case cfg.Identity == "":
		return nil, errors.New("sharedstate: empty identity")
	case cfg.Driver == nil:
		return fail(errors.New("nil Driver"))
	case p.Scope != cfg.Scope:
		return fail(&breaker.PolicyError{Field: "Scope", Reason: "is " + p.Scope.String() + ", but this backend provides only " + cfg.Scope.String() + " (use breaker.New for a circuit of this process alone)"})
	case p.FailureWindow > 0:
		return fail(&breaker.PolicyError{Field: "FailureWindow", Reason: "is set, but shared circuits count consecutive failures only; set it to 0"})
	case p.Mode != breaker.Enforce:
		return fail(&breaker.PolicyError{Field: "Mode", Reason: "is " + p.Mode.String() + ", but shared circuits only enforce; roll out with a local circuit first"})
	case cfg.IOTimeout < 0:
		return fail(errors.New("IOTimeout must not be negative"))
	}
	if cfg.MaxStaleness == 0 {
		cfg.MaxStaleness = DefaultMaxStaleness
	}
	if cfg.IOTimeout == 0 {
		cfg.IOTimeout = DefaultIOTimeout
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if cfg.Random == nil {
		cfg.Random = rand.Float64
	}
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = host + "/" + strconv.Itoa(os.Getpid()) + "/" + strconv.FormatUint(rand.Uint64()&0xffffff, 16)
	}
	if cfg.Unavailable == nil {
		id := cfg.Identity
		cfg.Unavailable = func(err error) error { return &UnavailableError{Identity: id, Err: err} }
	}
	c := &Circuit{cfg: cfg, policy: backend.Normalize(p), counting: p.FailureThreshold > 0}
	c.fingerprint, c.description = Fingerprint(p)
	c.legacyFingerprint = backend.Fingerprint(p)
	c.counter, _ = cfg.Driver.(Counter)
	c.staleness = max(int64(cfg.MaxStaleness), 0)
	c.refreshAfter = c.staleness - c.staleness/4
	c.systemClock = cfg.Clock == nil
	if c.systemClock {
		c.epoch = time.Now()
	} else {
		c.epoch = cfg.Clock.Now()
	}
	for _, f := range cfg.Observers {
		c.events.Observe(f)
	}
	return c, nil
}

// Observe adds an observer to a circuit in use, as Config.Observers does at creation:
// it sees the transitions from now on, not the earlier ones. An observer added under
// a key (any comparable value but nil) replaces the one added earlier under the same
// key, so that one attached again is not called twice. A registry uses it to report
// a factory-made circuit's transitions to its own observers.
func (c *Circuit) Observe(key any, f func(breaker.Transition)) { c.events.ObserveAs(key, f) }

// Identity returns the circuit's identity: the key of its record.
func (c *Circuit) Identity() string { return c.cfg.Identity }

// Policy returns the circuit's policy with defaults written out.
func (c *Circuit) Policy() breaker.Policy { return c.policy }

// Owner returns the name this replica writes into the probe leases it takes.
func (c *Circuit) Owner() string { return c.cfg.Owner }

// mono reads the time since the circuit was made, for the age of snapshots: with the
// system clock it is the monotonic reading, which is cheaper than a wall-clock read.
func (c *Circuit) mono() int64 {
	if c.systemClock {
		return int64(time.Since(c.epoch))
	}
	return int64(c.cfg.Clock.Now().Sub(c.epoch))
}

// wall reads the time written into records, in Unix nanoseconds.
func (c *Circuit) wall() int64 {
	if c.systemClock {
		return time.Now().UnixNano()
	}
	return c.cfg.Clock.Now().UnixNano()
}

// unavailable turns a cause into the error callers get. A record that is corrupt or
// belongs to another policy will not mend by waiting: the snapshot is dropped, so that
// no call is admitted on it.
func (c *Circuit) unavailable(err error) error {
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrPolicyMismatch) {
		c.view.Store(nil)
	}
	if errors.Is(err, breaker.ErrUnavailable) {
		return err
	}
	return c.cfg.Unavailable(err)
}

// Refresh reads the record now (creating it when it is missing) and updates the local
// snapshot. It returns what Acquire would return when the state cannot be used.
// Within RetryDelay of a failed attempt it returns that failure without trying again.
// Calling it at start-up checks the store and the policy before the first call.
func (c *Circuit) Refresh(ctx context.Context) error {
	_, err := c.refresh(ctx, false)
	return err
}

// RefreshIfStale reads the record, as Refresh does, only when the local snapshot is
// missing or MaxStaleness old. Backends whose reads are cheap call it before
// Snapshot, so that a snapshot is never older than an Acquire would accept.
func (c *Circuit) RefreshIfStale(ctx context.Context) error {
	if v, m := c.view.Load(), c.mono(); v != nil && m-v.at >= 0 && m-v.at < c.staleness {
		return nil
	}
	return c.Refresh(ctx)
}

// Forget drops the local snapshot and any failure being waited out, so that the next
// Acquire reads the record. Backends call it after they remove a record.
func (c *Circuit) Forget() {
	c.mu.Lock()
	c.setLastErr(nil)
	c.view.Store(nil)
	c.mu.Unlock()
}

// Acquire asks to make one call. On success the caller must Complete the permit
// exactly once. A fresh closed snapshot admits without I/O and a fresh open one
// rejects without I/O. Rejections: an *breaker.OpenError (errors.Is breaker.ErrOpen)
// while the shared circuit is open or its probe slots are taken, or (also matching
// Ramping set) turned away by the ramp after a close, which every replica
// runs from the close time in the record (Policy.RampDuration); an error matching
// breaker.ErrUnavailable when the state is too old and the store cannot be read, or
// holds a corrupt record or another policy's; breaker.ErrSaturated over MaxInFlight,
// which is counted per process. A context that has already ended returns its error.
func (c *Circuit) Acquire(ctx context.Context) (breaker.Permit, error) {
	if err := ctx.Err(); err != nil {
		return breaker.Permit{}, err
	}
	m := c.mono()
	if v := c.view.Load(); v != nil {
		// One comparison on the healthy path: admitUntil bounds the ForceClose hold.
		if m < v.admitUntil && m-v.at < c.refreshAfter && c.local.Load() == nil {
			return c.admitClosed(v, m)
		}
		if m < v.rejectUntil && m-v.at < c.refreshAfter {
			return breaker.Permit{}, v.reject
		}
		return c.acquireSlow(ctx, v, m)
	}
	return c.acquireSlow(ctx, nil, m)
}

func (c *Circuit) acquireSlow(ctx context.Context, v *view, m int64) (breaker.Permit, error) {
	if d := c.local.Load(); d != nil {
		if p, err, decided := c.acquireDegraded(ctx, d, v, m); decided {
			return p, err
		}
		v, m = c.view.Load(), c.mono()
	}
	if v != nil && m-v.at >= 0 && (m-v.at < c.staleness && m < v.admitUntil || m < v.rejectUntil) {
		// Soft refresh: one caller reads the record while the others keep deciding on
		// the snapshot, which is still good enough. A failure is not theirs yet.
		nv, err := c.refresh(ctx, true)
		if nv != nil {
			v = nv
		} else if err != nil && c.view.Load() == nil {
			return breaker.Permit{}, err // the record is corrupt or another policy's
		}
		// Re-read the clock: the refresh may have waited its whole I/O timeout, and
		// the snapshot must not admit past MaxStaleness on an earlier reading.
		m = c.mono()
		if m < v.admitUntil && m-v.at >= 0 && m-v.at < c.staleness {
			return c.admitClosed(v, m)
		}
		if m < v.rejectUntil {
			return breaker.Permit{}, v.reject
		}
	}
	for range maxAttempts {
		if v == nil || m-v.at < 0 || m-v.at >= c.staleness {
			nv, err := c.refresh(ctx, false)
			if err != nil {
				if v != nil && c.mono() < v.rejectUntil {
					return breaker.Permit{}, v.reject // known open: the refusal stands
				}
				return breaker.Permit{}, err
			}
			v, m = nv, c.mono()
		}
		p, err, retry := c.decide(ctx, v, m)
		if !retry {
			return p, err
		}
		v = nil // a conditional write lost: the record moved on, so read it again
	}
	return breaker.Permit{}, c.unavailable(errContention)
}

// decide admits or rejects a call on the state in v, writing the transition the state
// calls for. retry says that a conditional write lost and v is out of date.
func (c *Circuit) decide(ctx context.Context, v *view, m int64) (p breaker.Permit, err error, retry bool) {
	r, now := v.rec, c.wall()
	switch r.State {
	case breaker.Closed:
		if m < v.admitUntil {
			p, err = c.admitClosed(v, m)
			return p, err, false
		}
		if err := c.backoff(); err != nil {
			return breaker.Permit{}, err, false
		}
		next := r
		if v.tripped { // the count reached the threshold; nobody has written OPEN yet
			toOpen(&next, now, now+c.breakFor(0), breaker.ReasonFailureThreshold)
		} else { // a ForceClose ended
			toClosed(&next, now, breaker.ReasonOverrideExpired)
		}
		nv, err := c.write(ctx, r, next)
		switch {
		case errors.Is(err, ErrConflict):
			return breaker.Permit{}, nil, true
		case err != nil:
			if d, ok := c.refused(ctx, err); ok {
				p, err = c.openRefused(d, v) // degraded.go
				return p, err, false
			}
			return breaker.Permit{}, c.ioFailed(ctx, err), false
		case nv.reject != nil:
			return breaker.Permit{}, nv.reject, false
		}
		p, err = c.admit(nv.rec.Generation, false, 0)
		return p, err, false
	case breaker.Open:
		if now < r.OpenUntil {
			return breaker.Permit{}, v.reject, false
		}
		// The break (or a ForceOpen) is over: the caller that writes HALF-OPEN takes
		// the first probe.
		next := r
		reason := breaker.ReasonBreakElapsed
		if r.Override == breaker.ForcedOpen {
			reason = breaker.ReasonOverrideExpired
		}
		toHalfOpen(&next, now, reason)
		return c.takeLease(ctx, r, next, now)
	default: // HalfOpen
		live := liveLeases(r.Leases, now)
		if len(live) >= c.policy.HalfOpenMaxProbes {
			earliest := live[0].Expires
			for _, l := range live[1:] {
				earliest = min(earliest, l.Expires)
			}
			notBefore := max(now+int64(c.policy.HalfOpenRetryDelay), earliest)
			return breaker.Permit{}, backend.NewOpenError(c.cfg.Identity, c.cfg.Scope, time.Unix(0, notBefore)), false
		}
		next := r
		next.Leases = live // expired leases are taken over
		return c.takeLease(ctx, r, next, now)
	}
}

// liveLeases returns the leases that have not expired at now, in a new slice.
func liveLeases(leases []Lease, now int64) []Lease {
	var live []Lease
	for _, l := range leases {
		if now < l.Expires {
			live = append(live, l)
		}
	}
	return live
}

// takeLease writes next (the half-open record prev becomes) with a new probe lease of
// this replica, and hands out the probe.
//
// When the write's answer is lost (the store timed out, or the caller's context
// ended while the request was out), the lease may be stored with nobody to use it,
// and every replica would wait for it to expire. So the record is read again: a lease
// that is there is handed out, or given back when the caller is gone. A record that
// has moved past prev without the lease means the write lost to another one, as a
// conflict does, and can no longer be applied: the call is decided again on the
// record, not on local evidence, since the store has just answered. (Probing locally
// there would let every replica whose answer was lost in a recovery herd probe beside
// the fleet's HalfOpenMaxProbes.)
func (c *Circuit) takeLease(ctx context.Context, prev, next Record, now int64) (breaker.Permit, error, bool) {
	if err := c.backoff(); err != nil {
		return breaker.Permit{}, err, false
	}
	if !c.reserve() {
		return breaker.Permit{}, breaker.ErrSaturated, false
	}
	id := rand.Uint64() | 1
	next.Leases = append(slices.Clip(next.Leases), Lease{ID: id, Owner: c.cfg.Owner, Expires: now + int64(c.policy.ProbeLease)})
	_, err := c.write(ctx, prev, next)
	if errors.Is(err, ErrConflict) {
		c.release()
		return breaker.Permit{}, nil, true
	}
	if err != nil {
		held, moved, rerr := c.findLease(prev.Version, next.Generation, id)
		switch {
		case rerr != nil:
			err = rerr
		case held && ctx.Err() == nil:
			err = nil // the write took effect: the probe is ours
		case held:
			c.giveBack(next.Generation, id)
		case moved && ctx.Err() == nil:
			c.release()
			return breaker.Permit{}, nil, true // lost to another write
		}
	}
	if err != nil {
		c.release()
		if d, ok := c.refused(ctx, err); ok {
			p, err := c.probeLocally(d, prev.FailedProbes) // degraded.go
			return p, err, false
		}
		return breaker.Permit{}, c.ioFailed(ctx, err), false
	}
	return backend.NewPermit(c, backend.PermitInfo{Generation: next.Generation, Probe: true, Lease: id}), nil, false
}

// findLease reads the record (whatever the caller's context) and reports whether it
// holds lease id of generation gen, and whether its version is no longer expect, the
// one a write of that lease was conditional on.
func (c *Circuit) findLease(expect, gen, id uint64) (held, moved bool, err error) {
	v, err := c.reload()
	if err != nil {
		return false, false, err
	}
	held = v.rec.State == breaker.HalfOpen && v.rec.Generation == gen &&
		slices.ContainsFunc(v.rec.Leases, func(l Lease) bool { return l.ID == id })
	return held, v.rec.Version != expect, nil
}

// giveBack removes lease id of generation gen, so that another caller may probe now.
func (c *Circuit) giveBack(gen, id uint64) {
	c.updateProbe(gen, id, func(*Record, int64, int64) bool { return false })
}

// reload reads the record with a context of its own, bounded by the I/O timeout.
func (c *Circuit) reload() (*view, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.IOTimeout)
	defer cancel()
	v, err := c.load(ctx)
	c.events.Flush()
	return v, err
}

// write stores next over prev with a conditional write on prev's version, makes it the
// snapshot and returns its view. The snapshot's age counts from the request: the
// record may have moved on at any time after the store applied it.
func (c *Circuit) write(ctx context.Context, prev, next Record) (*view, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.IOTimeout)
	defer cancel()
	next.Version = prev.Version + 1
	c.noteOpening(prev, &next)
	at := c.mono()
	if err := c.cfg.Driver.Replace(ctx, c.cfg.Identity, prev.Version, next); err != nil {
		return nil, err
	}
	v := c.install(next, at, 0, false)
	c.events.Flush()
	return v, nil
}

// The transitions. Each starts a new generation, which makes every permit of the
// previous one stale, and records why and when for the replicas that learn of it.

func toOpen(r *Record, now, until int64, reason string) {
	startOutage(r, now)
	r.State, r.Generation, r.OpenUntil = breaker.Open, r.Generation+1, max(until, 1)
	r.Successes, r.Leases, r.Override, r.OverrideUntil = 0, nil, breaker.NoOverride, 0
	r.Reason, r.Since = reason, now
}

func toHalfOpen(r *Record, now int64, reason string) {
	r.State, r.Generation, r.OpenUntil = breaker.HalfOpen, r.Generation+1, 0
	r.Successes, r.Leases, r.Override, r.OverrideUntil = 0, nil, breaker.NoOverride, 0
	r.Reason, r.Since = reason, now
}

func toClosed(r *Record, now int64, reason string) {
	r.State, r.Generation, r.OpenUntil = breaker.Closed, r.Generation+1, 0
	r.Failures, r.Successes, r.Leases, r.Override, r.OverrideUntil = 0, 0, nil, breaker.NoOverride, 0
	r.Reason, r.Since = reason, now
	r.UnhealthySince = 0 // the outage, if any, is over
}

// ioFailed turns a failed request made for a caller whose context is ctx into the
// caller's error. A failure of the store (not of the caller's context) starts the
// RetryDelay.
func (c *Circuit) ioFailed(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return c.storeFailed(err)
}

// storeFailed records a failure of the store and starts the RetryDelay.
func (c *Circuit) storeFailed(err error) error {
	err = c.unavailable(err)
	c.mu.Lock()
	c.setLastErr(err)
	c.mu.Unlock()
	return err
}

// setLastErr starts the RetryDelay after err (nil ends it). Requires c.mu held.
func (c *Circuit) setLastErr(err error) {
	if c.cfg.RetryDelay < 0 {
		err = nil
	}
	c.lastErr, c.retryAt = err, c.mono()+int64(c.cfg.RetryDelay)
}

// backoff returns the last failure to reach the store while it is too recent to try
// again, else nil.
func (c *Circuit) backoff() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != nil && c.mono() < c.retryAt {
		return c.lastErr
	}
	return nil
}

// breakFor is Policy.BreakAfter in nanoseconds.
func (c *Circuit) breakFor(failedProbes int64) int64 {
	return int64(backend.BreakAfter(c.policy, int(failedProbes), c.cfg.Random))
}

// admitClosed admits a call on the closed view v at mono m, unless the ramp after
// the close turns it away. While ramping, MaxInFlight's bound rises with the share
// (checked before the slot is taken, so concurrent callers may pass it by a few; the
// bound of MaxInFlight itself stays exact).
func (c *Circuit) admitClosed(v *view, m int64) (breaker.Permit, error) {
	if v.ramp != nil && m < v.rampEnd {
		since := time.Duration(m - v.rampStart)
		share, refusal := v.ramp.Admit(since)
		if limit := c.policy.MaxInFlight; refusal == nil && limit > 0 {
			if n := c.inFlight.Load(); n < int64(limit) && n >= max(int64(share*float64(limit)), 1) {
				refusal = v.ramp.Refuse(since)
			}
		}
		if refusal != nil {
			c.rampRefused.Add(1)
			return breaker.Permit{}, refusal
		}
	}
	return c.admit(v.rec.Generation, false, 0)
}

// admit hands out a permit of generation gen. A closed permit carries its start time
// (wall) when calls are timed.
func (c *Circuit) admit(gen uint64, probe bool, lease uint64) (breaker.Permit, error) {
	if !c.reserve() {
		return breaker.Permit{}, breaker.ErrSaturated
	}
	if !probe && c.policy.SlowCallDuration > 0 {
		lease = uint64(c.mono())
	}
	return backend.NewPermit(c, backend.PermitInfo{Generation: gen, Probe: probe, Lease: lease}), nil
}

// reserve takes an in-flight slot when the policy bounds them, with a
// compare-and-swap so that a caller turned away never shows in Snapshot.InFlight.
func (c *Circuit) reserve() bool {
	if limit := int64(c.policy.MaxInFlight); limit > 0 {
		for {
			n := c.inFlight.Load()
			if n >= limit {
				return false
			}
			if c.inFlight.CompareAndSwap(n, n+1) {
				return true
			}
		}
	}
	return true
}

func (c *Circuit) release() {
	if c.policy.MaxInFlight > 0 {
		c.inFlight.Add(-1)
	}
}

// refresh reads the record, one read at a time: callers that arrive while a read runs
// wait for its result (bounded by their context). In soft mode they do not wait, and
// nothing is read while a failure is too recent; refresh then returns nil, nil.
func (c *Circuit) refresh(ctx context.Context, soft bool) (*view, error) {
	c.mu.Lock()
	if call := c.loading; call != nil {
		c.mu.Unlock()
		if soft {
			return nil, nil
		}
		select {
		case <-call.done:
			return call.v, call.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if c.lastErr != nil && c.mono() < c.retryAt {
		err := c.lastErr
		c.mu.Unlock()
		if soft {
			return nil, nil
		}
		return nil, err
	}
	call := &loadCall{done: make(chan struct{})}
	c.loading = call
	c.mu.Unlock()

	// The read serves every waiter, so the leader's cancellation must not end it.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.IOTimeout)
	call.v, call.err = c.load(lctx)
	cancel()

	c.mu.Lock()
	c.loading = nil
	c.setLastErr(call.err)
	c.mu.Unlock()
	close(call.done)
	c.events.Flush()
	return call.v, call.err
}

// load reads the record (creating a closed one when it is missing), checks it and its
// policy, and makes it the snapshot.
func (c *Circuit) load(ctx context.Context) (*view, error) {
	for range maxAttempts {
		installs, at := c.installs.Load(), c.mono()
		r, err := c.cfg.Driver.Load(ctx, c.cfg.Identity)
		if errors.Is(err, ErrNotFound) {
			// Version and generation start at the clock, not at 1, so that a record
			// removed and created again can never match a snapshot or a permit from
			// before the removal.
			start := uint64(max(c.wall(), 1))
			r = Record{Version: start, Fingerprint: c.fingerprint, Policy: c.description, State: breaker.Closed, Generation: start}
			if known, ok := c.remembered(nil, at, c.wall()); ok {
				r = known // the store forgot an open circuit: write it back (amnesia.go)
			}
			if err = c.cfg.Driver.Replace(ctx, c.cfg.Identity, 0, r); errors.Is(err, ErrConflict) {
				continue // another replica created it first
			}
		}
		if err != nil {
			return nil, c.unavailable(err)
		}
		if err := r.Check(c.cfg.Identity); err != nil {
			return nil, c.unavailable(err)
		}
		if isTombstone(r) { // removed on purpose: start afresh (amnesia.go)
			start := max(uint64(max(c.wall(), 1)), r.Version+1, r.Generation+1)
			fresh := Record{Version: start, Fingerprint: c.fingerprint, Policy: c.description, State: breaker.Closed,
				Generation: start, Reason: ReasonCleared, Since: c.wall()}
			if err := c.cfg.Driver.Replace(ctx, c.cfg.Identity, r.Version, fresh); errors.Is(err, ErrConflict) {
				continue
			} else if err != nil {
				return nil, c.unavailable(err)
			}
			r = fresh
		}
		if r.Fingerprint != c.fingerprint && r.Fingerprint != c.legacyFingerprint {
			return nil, c.unavailable(mismatch(c.cfg.Identity, r.Fingerprint, r.Policy, c.fingerprint, c.description))
		}
		if known, ok := c.remembered(&r, at, c.wall()); ok {
			// The store holds an older state than this replica knows (amnesia.go).
			if err := c.cfg.Driver.Replace(ctx, c.cfg.Identity, r.Version, known); errors.Is(err, ErrConflict) {
				continue
			} else if err != nil {
				return nil, c.unavailable(err)
			}
			r = known
		}
		return c.install(r, at, installs, true), nil
	}
	return nil, c.unavailable(errContention)
}

// newView wraps r, read or written at the mono reading at (wall time now).
func (c *Circuit) newView(r Record, at int64) *view {
	v := &view{rec: r, at: at}
	// Deadlines are wall times in the record; convert them to this process's mono.
	toMono := func(wall int64) int64 { return at + (wall - c.wall()) }
	switch r.State {
	case breaker.Closed:
		v.tripped = c.counting && r.Override == breaker.NoOverride && r.Failures >= int64(c.policy.FailureThreshold)
		switch {
		case v.tripped:
		case r.Override == breaker.ForcedClosed:
			v.admitUntil = toMono(r.OverrideUntil)
		default:
			v.admitUntil = 1<<63 - 1
		}
		if r.Reason == breaker.ReasonProbeSucceeded && r.Override == breaker.NoOverride && c.policy.RampDuration > 0 {
			v.rampStart = toMono(r.Since)
			v.rampEnd = v.rampStart + int64(c.policy.RampDuration)
			if cur := c.view.Load(); cur != nil && cur.rec.Generation == r.Generation && cur.ramp != nil {
				v.ramp = cur.ramp // one ramp per generation: its decisions go on where they were
			} else if at < v.rampEnd {
				v.ramp = backend.NewRamp(c.cfg.Identity, c.policy, time.Unix(0, r.Since), rand.Uint64())
			}
		}
	case breaker.Open:
		v.rejectUntil = toMono(r.OpenUntil)
		if cur := c.view.Load(); cur != nil && cur.rec.Generation == r.Generation && cur.reject != nil {
			v.reject = cur.reject // one rejection per open generation
		} else {
			v.reject = backend.NewOpenError(c.cfg.Identity, c.cfg.Scope, time.Unix(0, r.OpenUntil))
		}
	}
	return v
}

// install makes the view of r the snapshot and returns the snapshot in force. A
// write's result does not replace a newer version. A read's result replaces a newer
// version only when nothing was installed since the read began (installs is the
// count then): the record was removed and created again. Otherwise the read is older
// than this process's own write or a read that overtook it, and installing it would
// undo, for example, an OPEN this replica wrote or has seen, and show its observers
// the generation going back. A new generation is queued for the observers; the
// caller flushes.
func (c *Circuit) install(r Record, at int64, installs uint64, read bool) *view {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.view.Load()
	if cur != nil && cur.rec.Version > r.Version && (!read || c.installs.Load() != installs) {
		return cur
	}
	c.installs.Add(1)
	v := c.newView(r, at)
	c.view.Store(v)
	// A record written back after the store forgot it (amnesia.go) may carry a new
	// generation for the same transition: that is no transition.
	if cur != nil && cur.rec.Generation != r.Generation &&
		(cur.rec.State != r.State || cur.rec.Since != r.Since || cur.rec.Reason != r.Reason) {
		reason := r.Reason
		if reason == "" {
			reason = "unknown"
		}
		c.events.Push(breaker.Transition{
			Identity: c.cfg.Identity, From: cur.rec.State, To: r.State, Generation: r.Generation,
			At: time.Unix(0, r.Since), Reason: reason,
		})
	}
	return v
}

// reportError tells OnError what Complete cannot return.
func (c *Circuit) reportError(err error) {
	if c.cfg.OnError != nil {
		c.cfg.OnError(err)
	}
}

// Snapshot returns this replica's view of the shared circuit, without I/O: it may be
// up to MaxStaleness old. Before the first read it reports a closed circuit of
// generation 0. InFlight counts this process's permits when the policy sets
// MaxInFlight; Probes counts the unexpired leases of every replica.
func (c *Circuit) Snapshot() breaker.Snapshot {
	v := c.view.Load()
	if v == nil {
		s := breaker.Snapshot{Identity: c.cfg.Identity, Scope: c.cfg.Scope, InFlight: int(c.inFlight.Load()),
			RampShare: 1, RampRefused: c.rampRefused.Load()}
		c.degradedSnapshot(&s)
		return s
	}
	s := snapshotOf(c.cfg.Identity, c.cfg.Scope, v.rec, c.wall())
	s.InFlight, s.RampRefused = int(c.inFlight.Load()), c.rampRefused.Load()
	c.fillLastFailure(&s)
	if m := c.mono(); v.ramp != nil && m < v.rampEnd {
		s.RampUntil, s.RampShare = v.ramp.Until(), backend.RampShare(c.policy, time.Duration(m-v.rampStart))
	}
	c.degradedSnapshot(&s)
	return s
}

// snapshotOf presents the record r of identity in a circuit's terms at wall time now
// (Unix nanoseconds): Probes counts the leases unexpired then. A ramp needs the
// policy, so it is reported as none (RampShare 1); Snapshot adds the circuit's.
func snapshotOf(identity string, scope breaker.Scope, r Record, now int64) breaker.Snapshot {
	s := breaker.Snapshot{Identity: identity, Scope: scope, RampShare: 1,
		State: r.State, Generation: r.Generation, Failures: int(r.Failures), Override: r.Override}
	if r.Override != breaker.NoOverride {
		s.OverrideUntil = time.Unix(0, r.OverrideUntil)
	}
	switch r.State {
	case breaker.Open:
		s.NotBefore = time.Unix(0, r.OpenUntil)
	case breaker.HalfOpen:
		s.Probes = len(liveLeases(r.Leases, now))
	}
	healthOf(&s, r)
	return s
}
