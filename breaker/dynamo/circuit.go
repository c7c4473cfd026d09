package dynamo

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

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Defaults of the options.
const (
	DefaultMaxStateStaleness = time.Second
	DefaultBackendRetryDelay = time.Second
	DefaultIOTimeout         = 2 * time.Second
)

// maxAttempts bounds the conditional writes one decision makes before it gives up to
// concurrent writers.
const maxAttempts = 8

// Option configures a Circuit.
type Option func(*config)

type config struct {
	staleness  time.Duration
	retryDelay time.Duration
	ioTimeout  time.Duration
	clock      breaker.Clock
	owner      string
	prefix     string
	random     func() float64
}

// WithMaxStateStaleness sets how old the process-local snapshot of the item may be
// before a closed circuit stops admitting calls on its strength (default one second).
// An OPEN written by another replica is seen within this time.
func WithMaxStateStaleness(d time.Duration) Option { return func(c *config) { c.staleness = d } }

// WithBackendRetryDelay sets how long the circuit waits after a failed attempt to
// reach the table before it tries again (default one second). Calls in between that
// need the table are refused at once.
func WithBackendRetryDelay(d time.Duration) Option { return func(c *config) { c.retryDelay = d } }

// WithIOTimeout bounds each DynamoDB request the circuit makes (default two seconds).
// Writes made for an Acquire are also bounded by the caller's context. A read of the
// item serves every caller waiting for it, so it is bounded by this timeout alone:
// the caller that makes it waits for it whatever its context (also when it only
// refreshes a closed snapshot that is three quarters stale), while the callers that
// join it stop waiting when their context ends.
func WithIOTimeout(d time.Duration) Option { return func(c *config) { c.ioTimeout = d } }

// WithClock makes the circuit read time from clk (tests use a fake clock). Every
// replica writes deadlines from its own clock, so replicas need clocks that agree to
// well within BreakDuration and ProbeLease.
func WithClock(clk breaker.Clock) Option { return func(c *config) { c.clock = clk } }

// WithOwner names this replica in the probe leases it takes (default host name,
// process id and a random suffix).
func WithOwner(owner string) Option { return func(c *config) { c.owner = owner } }

// WithIdentityPrefix puts prefix before the destination in the identities Factory
// makes ("orders-service/" gives "orders-service/kafka:orders"). New ignores it.
func WithIdentityPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithRandom sets the source of jitter: f returns a number in [0, 1) and must be safe
// for concurrent use. The default is math/rand/v2.Float64.
func WithRandom(f func() float64) Option { return func(c *config) { c.random = f } }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Circuit is a circuit breaker whose state lives in one DynamoDB item, shared by every
// replica that uses the same table and identity (scope SharedDependency). It is safe
// for concurrent use and starts no goroutine. Create it with New or Factory.
type Circuit struct {
	identity    string
	table       string
	st          store
	policy      breaker.Policy // normalized
	fingerprint string
	counting    bool
	cfg         config
	// refreshAfter is the age at which one caller refreshes a closed snapshot while
	// the others keep using it.
	refreshAfter time.Duration

	view     atomic.Pointer[view] // the last state read or written; nil before the first
	writes   atomic.Uint64        // views installed from this process's writes, so far
	inFlight atomic.Int64         // admitted, uncompleted permits; counted only when MaxInFlight > 0

	mu      sync.Mutex // guards the fields below
	loading *loadCall  // the load in flight, which other callers join
	lastErr error      // the last failure to reach or use the table, until retryAt
	retryAt time.Time
}

// view is an immutable, process-local copy of the item.
type view struct {
	it      item
	at      time.Time          // when it was read or written
	tripped bool               // closed with failures at the threshold: the next Acquire opens it
	reject  *breaker.OpenError // open: the rejection handed to every caller of this generation
}

type loadCall struct {
	done chan struct{}
	v    *view
	err  error
}

var _ breaker.Circuit = (*Circuit)(nil)
var _ breaker.Completer = (*Circuit)(nil)

// New returns the shared circuit identity, kept in table (see CreateTable). The policy
// must be valid, have scope SharedDependency and count consecutive failures
// (FailureWindow 0): window mode is not supported by this backend. New does no I/O;
// the first Acquire (or Refresh) reads the item, creating it when it is missing.
func New(client *dynamodb.Client, table, identity string, p breaker.Policy, opts ...Option) (*Circuit, error) {
	if client == nil {
		return nil, errors.New("dynamo: New: nil DynamoDB client")
	}
	return newCircuit(&tableStore{client: client, table: table}, table, identity, p, opts...)
}

// Factory returns a registry.Factory that makes a shared circuit per destination, with
// the destination's String() (after WithIdentityPrefix's prefix) as its identity:
//
//	reg, err := registry.New(policy, registry.WithCircuitFactory(breaker.SharedDependency,
//		dynamo.Factory(client, "circuits", dynamo.WithIdentityPrefix("billing/"))))
func Factory(client *dynamodb.Client, table string, opts ...Option) registry.Factory {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	return func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		return New(client, table, cfg.prefix+d.String(), p, opts...)
	}
}

func newCircuit(st store, table, identity string, p breaker.Policy, opts ...Option) (*Circuit, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("dynamo: circuit %q: %w", identity, err)
	}
	switch {
	case p.Scope != breaker.SharedDependency:
		return nil, fmt.Errorf("dynamo: circuit %q: %w", identity, &breaker.PolicyError{
			Field: "Scope", Reason: "is " + p.Scope.String() + "; breaker/dynamo provides only SHARED_DEPENDENCY (use breaker.New for a local circuit)"})
	case p.FailureWindow > 0:
		return nil, fmt.Errorf("dynamo: circuit %q: %w", identity, &breaker.PolicyError{
			Field: "FailureWindow", Reason: "is set, but breaker/dynamo counts only consecutive failures; set it to 0"})
	case p.Mode != breaker.Enforce:
		return nil, fmt.Errorf("dynamo: circuit %q: %w", identity, &breaker.PolicyError{
			Field: "Mode", Reason: "is " + p.Mode.String() + ", but breaker/dynamo only enforces; roll out with a local circuit first"})
	case identity == "":
		return nil, errors.New("dynamo: New: empty identity")
	case table == "":
		return nil, fmt.Errorf("dynamo: circuit %q: empty table name", identity)
	}
	cfg := config{
		staleness:  DefaultMaxStateStaleness,
		retryDelay: DefaultBackendRetryDelay,
		ioTimeout:  DefaultIOTimeout,
		clock:      systemClock{},
		random:     rand.Float64,
	}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.staleness <= 0:
		return nil, fmt.Errorf("dynamo: circuit %q: MaxStateStaleness must be positive (got %v)", identity, cfg.staleness)
	case cfg.retryDelay < 0:
		return nil, fmt.Errorf("dynamo: circuit %q: BackendRetryDelay must not be negative (got %v)", identity, cfg.retryDelay)
	case cfg.ioTimeout <= 0:
		return nil, fmt.Errorf("dynamo: circuit %q: IOTimeout must be positive (got %v)", identity, cfg.ioTimeout)
	case cfg.clock == nil || cfg.random == nil:
		return nil, fmt.Errorf("dynamo: circuit %q: nil clock or random source", identity)
	}
	if cfg.owner == "" {
		host, _ := os.Hostname()
		cfg.owner = host + "/" + strconv.Itoa(os.Getpid()) + "/" + strconv.FormatUint(rand.Uint64()&0xffffff, 16)
	}
	return &Circuit{
		identity:     identity,
		table:        table,
		st:           st,
		policy:       p.Normalized(),
		fingerprint:  p.Fingerprint(),
		counting:     p.Enabled(),
		cfg:          cfg,
		refreshAfter: cfg.staleness - cfg.staleness/4,
	}, nil
}

// Identity returns the circuit's identity: the key of its item.
func (c *Circuit) Identity() string { return c.identity }

// Policy returns the circuit's policy with defaults written out.
func (c *Circuit) Policy() breaker.Policy { return c.policy }

// Owner returns the name this replica writes into the probe leases it takes.
func (c *Circuit) Owner() string { return c.cfg.owner }

func (c *Circuit) now() time.Time { return c.cfg.clock.Now() }

func (c *Circuit) unavailable(err error) error {
	return &UnavailableError{Identity: c.identity, Table: c.table, Err: err}
}

// Refresh reads the item now (creating it when it is missing) and updates the local
// snapshot. It returns what Acquire would return when the state cannot be used: an
// *UnavailableError. Within BackendRetryDelay of a failed attempt it returns that
// failure without trying again. Calling it at start-up checks the table and the
// policy fingerprint before the first call.
func (c *Circuit) Refresh(ctx context.Context) error {
	_, err := c.refresh(ctx, false)
	return err
}

// Acquire asks to make one call. On success the caller must Complete the permit
// exactly once. A closed circuit whose snapshot is fresh admits without I/O; one
// caller refreshes the snapshot when it is three quarters stale, while the others
// keep using it. Rejections: an *breaker.OpenError (errors.Is breaker.ErrOpen) while
// the shared circuit is open or its probe slots are taken; an *UnavailableError
// (errors.Is breaker.ErrUnavailable) when the state is too old and the table cannot be
// read, or its item is corrupt or has another policy; breaker.ErrSaturated over
// MaxInFlight, which this backend counts per process. A context that has already
// ended returns its error.
func (c *Circuit) Acquire(ctx context.Context) (breaker.Permit, error) {
	if err := ctx.Err(); err != nil {
		return breaker.Permit{}, err
	}
	now := c.now()
	if v := c.view.Load(); v != nil && v.it.state == breaker.Closed && !v.tripped {
		age := now.Sub(v.at)
		if age < c.refreshAfter {
			return c.admit(v.it.gen, now)
		}
		if age < c.cfg.staleness {
			// Soft refresh: one caller reads the item; a failure here is not the
			// caller's problem yet, since the snapshot is still fresh enough.
			if nv, _ := c.refresh(ctx, true); nv != nil {
				v = nv
			}
			if v.it.state == breaker.Closed && !v.tripped {
				return c.admit(v.it.gen, now)
			}
		}
	}
	return c.acquireSlow(ctx, now)
}

// usable reports whether v can decide an admission at now without reading the item:
// it is fresh, or it is open before its deadline (nobody can leave OPEN earlier).
func (c *Circuit) usable(v *view, now time.Time) bool {
	if v == nil {
		return false
	}
	if v.it.state == breaker.Open && now.UnixNano() < v.it.openUntil {
		return true
	}
	return now.Sub(v.at) < c.cfg.staleness
}

func (c *Circuit) acquireSlow(ctx context.Context, now time.Time) (breaker.Permit, error) {
	v := c.view.Load()
	for range maxAttempts {
		if !c.usable(v, now) {
			var err error
			if v, err = c.refresh(ctx, false); err != nil {
				return breaker.Permit{}, err
			}
			now = c.now()
		}
		p, err, retry := c.decide(ctx, v, now)
		if !retry {
			return p, err
		}
		// A conditional write lost: the item moved on, so read it again.
		v = nil
	}
	return breaker.Permit{}, c.unavailable(errContention)
}

// decide admits or rejects a call on the state in v, writing the transition the
// state calls for. retry says that a conditional write lost and v is out of date.
func (c *Circuit) decide(ctx context.Context, v *view, now time.Time) (p breaker.Permit, err error, retry bool) {
	it := v.it
	switch it.state {
	case breaker.Closed:
		if !v.tripped {
			p, err = c.admit(it.gen, now)
			return p, err, false
		}
		// The shared count reached the threshold but nobody wrote OPEN (a replica
		// failed between the two writes): this caller does.
		if err := c.backoff(now); err != nil {
			return breaker.Permit{}, err, false
		}
		next, err := c.trip(ctx, it, now)
		switch {
		case errors.Is(err, errConflict):
			return breaker.Permit{}, nil, true
		case err != nil:
			return breaker.Permit{}, c.ioFailed(ctx, err), false
		}
		return breaker.Permit{}, next.reject, false
	case breaker.Open:
		if now.UnixNano() < it.openUntil {
			return breaker.Permit{}, v.reject, false
		}
		// The break is over: the caller that writes HALF-OPEN takes the first probe.
		next := it
		next.state, next.gen, next.successes, next.leases = breaker.HalfOpen, it.gen+1, 0, nil
		return c.takeLease(ctx, it, next, now)
	default: // HalfOpen
		live := liveLeases(it.leases, now.UnixNano())
		if len(live) >= c.policy.HalfOpenMaxProbes {
			earliest := live[0].expires
			for _, l := range live[1:] {
				earliest = min(earliest, l.expires)
			}
			notBefore := max(now.Add(c.policy.HalfOpenRetryDelay).UnixNano(), earliest)
			return breaker.Permit{}, breaker.NewOpenError(c.identity, breaker.SharedDependency, time.Unix(0, notBefore)), false
		}
		next := it
		next.leases = live // expired leases are taken over
		return c.takeLease(ctx, it, next, now)
	}
}

// liveLeases returns the leases that have not expired at now, in a new slice.
func liveLeases(leases []lease, now int64) []lease {
	var live []lease
	for _, l := range leases {
		if now < l.expires {
			live = append(live, l)
		}
	}
	return live
}

// takeLease writes next (the half-open item prev becomes) with a new probe lease of
// this replica, and hands out the probe.
func (c *Circuit) takeLease(ctx context.Context, prev, next item, now time.Time) (breaker.Permit, error, bool) {
	if err := c.backoff(now); err != nil {
		return breaker.Permit{}, err, false
	}
	if !c.reserve() {
		return breaker.Permit{}, breaker.ErrSaturated, false
	}
	id := rand.Uint64() >> 1
	if id == 0 {
		id = 1
	}
	next.leases = append(slices.Clip(next.leases), lease{
		id: id, owner: c.cfg.owner, expires: now.Add(c.policy.ProbeLease).UnixNano(),
	})
	if _, err := c.write(ctx, prev, next, now); err != nil {
		c.release()
		if errors.Is(err, errConflict) {
			return breaker.Permit{}, nil, true
		}
		return breaker.Permit{}, c.ioFailed(ctx, err), false
	}
	return breaker.NewPermit(c, breaker.PermitInfo{Generation: next.gen, Probe: true, Lease: id}), nil, false
}

// trip writes OPEN over the closed item it whose failures reached the threshold.
func (c *Circuit) trip(ctx context.Context, it item, now time.Time) (*view, error) {
	next := it
	next.state, next.gen, next.successes, next.leases = breaker.Open, it.gen+1, 0, nil
	next.openUntil = now.UnixNano() + c.breakFor(0)
	return c.write(ctx, it, next, now)
}

// write stores next over prev with a conditional write on prev's version, makes it the
// snapshot and returns its view.
func (c *Circuit) write(ctx context.Context, prev, next item, now time.Time) (*view, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ioTimeout)
	defer cancel()
	next.version = prev.version + 1
	if err := c.st.put(ctx, next, prev.version); err != nil {
		return nil, err
	}
	v := c.newView(next, now)
	c.install(v, 0, false)
	return v, nil
}

// ioFailed turns a failed request made for a caller whose context is ctx into the
// caller's error. A failure of the table (not of the caller's context) starts the
// BackendRetryDelay.
func (c *Circuit) ioFailed(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return c.tableFailed(err)
}

// tableFailed records the failure of a request that only the I/O timeout bounds, so
// that it failed by the table's fault (a timeout included), and starts the
// BackendRetryDelay.
func (c *Circuit) tableFailed(err error) error {
	err = c.unavailable(err)
	c.mu.Lock()
	c.lastErr, c.retryAt = err, c.now().Add(c.cfg.retryDelay)
	c.mu.Unlock()
	return err
}

// backoff returns the last failure to reach the table while it is too recent to try
// again (within BackendRetryDelay), else nil.
func (c *Circuit) backoff(now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastErr != nil && now.Before(c.retryAt) {
		return c.lastErr
	}
	return nil
}

// breakFor is Policy.BreakAfter in nanoseconds.
func (c *Circuit) breakFor(failedProbes int64) int64 {
	return int64(c.policy.BreakAfter(int(failedProbes), c.cfg.random))
}

// admit hands out a permit of the closed generation gen.
func (c *Circuit) admit(gen uint64, now time.Time) (breaker.Permit, error) {
	if !c.reserve() {
		return breaker.Permit{}, breaker.ErrSaturated
	}
	var start uint64
	if c.policy.SlowCallDuration > 0 {
		start = uint64(now.UnixNano())
	}
	return breaker.NewPermit(c, breaker.PermitInfo{Generation: gen, Lease: start}), nil
}

func (c *Circuit) reserve() bool {
	if limit := int64(c.policy.MaxInFlight); limit > 0 {
		if c.inFlight.Add(1) > limit {
			c.inFlight.Add(-1)
			return false
		}
	}
	return true
}

func (c *Circuit) release() {
	if c.policy.MaxInFlight > 0 {
		c.inFlight.Add(-1)
	}
}

// refresh reads the item, one load at a time: callers that arrive while a load runs
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
	if c.lastErr != nil && c.now().Before(c.retryAt) {
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

	// The load serves every waiter, so the leader's cancellation must not end it.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ioTimeout)
	call.v, call.err = c.load(lctx, c.now())
	cancel()

	c.mu.Lock()
	c.loading = nil
	if call.err != nil {
		c.lastErr, c.retryAt = call.err, c.now().Add(c.cfg.retryDelay)
	} else {
		c.lastErr = nil
	}
	c.mu.Unlock()
	close(call.done)
	return call.v, call.err
}

// load reads the item (creating a closed one when it is missing), checks its policy
// fingerprint and makes it the snapshot.
func (c *Circuit) load(ctx context.Context, at time.Time) (*view, error) {
	for range maxAttempts {
		writes := c.writes.Load()
		it, err := c.st.load(ctx, c.identity)
		if errors.Is(err, errNotFound) {
			// Version and generation start at the clock, not at 1, so that an item an
			// operator deleted and that is created again can never match a snapshot
			// or a permit from before the deletion.
			start := uint64(at.UnixNano())
			it = item{id: c.identity, version: start, fingerprint: c.fingerprint, state: breaker.Closed, gen: start}
			if err = c.st.put(ctx, it, 0); errors.Is(err, errConflict) {
				continue // another replica created it first
			}
		}
		if err != nil {
			return nil, c.unavailable(err)
		}
		if it.fingerprint != c.fingerprint {
			return nil, c.unavailable(&FingerprintError{Identity: c.identity, Stored: it.fingerprint, Ours: c.fingerprint})
		}
		return c.install(c.newView(it, at), writes, true), nil
	}
	return nil, c.unavailable(errContention)
}

// newView wraps it, read or written at at.
func (c *Circuit) newView(it item, at time.Time) *view {
	v := &view{
		it: it, at: at,
		tripped: c.counting && it.state == breaker.Closed && it.failures >= int64(c.policy.FailureThreshold),
	}
	if it.state == breaker.Open {
		v.reject = breaker.NewOpenError(c.identity, breaker.SharedDependency, time.Unix(0, it.openUntil))
	}
	return v
}

// install makes v the snapshot and returns the snapshot in force. A write's result
// does not replace a newer version. A read's result replaces a newer version only when
// this process wrote nothing since the read began (writes is the count then): the
// item was deleted and created again. Otherwise the read is older than this process's
// own write, and installing it would undo, for example, the OPEN it just wrote.
func (c *Circuit) install(v *view, writes uint64, read bool) *view {
	if !read {
		c.writes.Add(1)
	}
	for {
		cur := c.view.Load()
		if cur != nil && cur.it.version > v.it.version && (!read || c.writes.Load() != writes) {
			return cur
		}
		if c.view.CompareAndSwap(cur, v) {
			return v
		}
	}
}

// CompletePermit records the outcome of a permit this circuit issued; Permit.Complete
// calls it once per permit. It implements breaker.Completer and returns whether the
// outcome was taken into account.
//
// A closed permit's Failure adds one to the shared count (one UpdateItem) and writes
// OPEN when the count reaches the threshold. Its Success writes only when this
// replica's snapshot shows failures to reset; a count another replica raised since
// the snapshot was read is reset by the next Success after a refresh. A probe's outcome
// is a conditional write on the item. Outcomes of an older generation, of an expired
// or taken-over lease, or that cannot be written (the table is unreachable) change
// nothing and return false. Each request is bounded by the IO timeout.
func (c *Circuit) CompletePermit(info breaker.PermitInfo, o breaker.Outcome) bool {
	c.release()
	if info.Probe {
		return c.completeProbe(info, o, c.now())
	}
	v := c.view.Load()
	if v == nil || v.it.state != breaker.Closed || v.it.gen != info.Generation {
		return false
	}
	if o == breaker.Success && c.policy.SlowCallDuration > 0 &&
		c.now().Sub(time.Unix(0, int64(info.Lease))) > c.policy.SlowCallDuration {
		o = breaker.Failure
	}
	if !c.counting || o != breaker.Success && o != breaker.Failure {
		return true
	}
	if o == breaker.Success && v.it.failures == 0 {
		return true // healthy traffic reads no clock and writes nothing
	}
	now := c.now()
	if c.backoff(now) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ioTimeout)
	defer cancel()
	var it item
	var err error
	if o == breaker.Success {
		it, err = c.st.resetFailures(ctx, c.identity, c.fingerprint, info.Generation)
	} else {
		it, err = c.st.addFailure(ctx, c.identity, c.fingerprint, info.Generation)
	}
	switch {
	case errors.Is(err, errConflict):
		// The generation moved on, or (for a Success) another replica already reset
		// the count: read the item to tell which.
		nv, err := c.refresh(ctx, false)
		return err == nil && nv.it.state == breaker.Closed && nv.it.gen == info.Generation
	case err != nil:
		_ = c.tableFailed(err)
		return false
	}
	if nv := c.install(c.newView(it, now), 0, false); nv.tripped && nv.it.version == it.version {
		if _, err := c.trip(ctx, it, now); err != nil && !errors.Is(err, errConflict) {
			_ = c.tableFailed(err)
		}
	}
	return true
}

func (c *Circuit) completeProbe(info breaker.PermitInfo, o breaker.Outcome, now time.Time) bool {
	if c.backoff(now) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ioTimeout)
	defer cancel()
	v := c.view.Load()
	if v != nil && v.it.gen > info.Generation {
		return false // the circuit has moved on since this probe was admitted
	}
	var it item
	if v != nil && v.it.state == breaker.HalfOpen && v.it.gen == info.Generation {
		it = v.it // try the snapshot's version first; a lost write reads the item
	} else {
		var err error
		if it, err = c.st.load(ctx, c.identity); err != nil {
			_ = c.tableFailed(err)
			return false
		}
	}
	for range maxAttempts {
		if it.fingerprint != c.fingerprint || it.state != breaker.HalfOpen || it.gen != info.Generation {
			return false // an older generation: the circuit moved on without this probe
		}
		i := slices.IndexFunc(it.leases, func(l lease) bool { return l.id == info.Lease })
		if i < 0 || now.UnixNano() >= it.leases[i].expires {
			return false // the lease expired, and may have been taken over
		}
		start := time.Unix(0, it.leases[i].expires).Add(-c.policy.ProbeLease)
		outcome := o
		if outcome == breaker.Success && c.policy.SlowCallDuration > 0 && now.Sub(start) > c.policy.SlowCallDuration {
			outcome = breaker.Failure
		}
		next := it
		next.leases = slices.Delete(slices.Clone(it.leases), i, i+1)
		switch outcome {
		case breaker.Success:
			next.successes++
			if next.successes >= int64(c.policy.SuccessesToClose) {
				next = item{id: it.id, fingerprint: it.fingerprint, state: breaker.Closed, gen: it.gen + 1}
			}
		case breaker.Failure:
			next.failedProbes++
			next.state, next.gen, next.successes, next.leases = breaker.Open, it.gen+1, 0, nil
			next.openUntil = now.UnixNano() + c.breakFor(next.failedProbes)
		}
		_, err := c.write(ctx, it, next, now)
		if err == nil {
			return true
		}
		if !errors.Is(err, errConflict) {
			_ = c.tableFailed(err)
			return false
		}
		if it, err = c.st.load(ctx, c.identity); err != nil {
			_ = c.tableFailed(err)
			return false
		}
	}
	return false
}

// Snapshot returns this replica's view of the shared circuit, without I/O: it may be
// up to MaxStateStaleness old. Before the first read of the item it reports a closed
// circuit of generation 0. InFlight counts this process's permits when the policy
// sets MaxInFlight; Probes counts the unexpired leases of every replica.
func (c *Circuit) Snapshot() breaker.Snapshot {
	s := breaker.Snapshot{Identity: c.identity, Scope: breaker.SharedDependency, InFlight: int(c.inFlight.Load())}
	v := c.view.Load()
	if v == nil {
		return s
	}
	s.State, s.Generation, s.Failures = v.it.state, v.it.gen, int(v.it.failures)
	switch v.it.state {
	case breaker.Open:
		s.NotBefore = time.Unix(0, v.it.openUntil)
	case breaker.HalfOpen:
		s.Probes = len(liveLeases(v.it.leases, c.now().UnixNano()))
	}
	return s
}
