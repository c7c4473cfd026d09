package registry

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/transport"
)

// DefaultMaxDestinations is the cap on live circuits unless WithMaxDestinations says
// otherwise.
const DefaultMaxDestinations = 10_000

// ErrTooManyDestinations is returned (wrapped, naming the destination) when a new
// destination would pass the cap on live circuits.
var ErrTooManyDestinations = errors.New("registry: too many destinations")

// Factory makes the circuit for a destination whose circuit policy has a scope the
// local breaker cannot provide (breaker/dynamo's factory, for example). It receives
// the circuit's policy only: admission is the registry's, per process.
type Factory func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error)

// Option configures a Registry.
type Option func(*Registry) error

// WithOverride sets the policy of one destination, keyed exactly as
// Destination.String() spells it ("kafka:orders").
func WithOverride(destination string, p Policy) Option {
	return func(r *Registry) error {
		d, err := transport.ParseDestination(destination)
		if err != nil {
			return fmt.Errorf("registry: override %q: %w", destination, err)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("registry: override %q: %w", destination, err)
		}
		r.overrides[d] = p
		return nil
	}
}

// WithMaxDestinations caps the number of live circuits (default 10,000). Past the cap
// a new destination gets ErrTooManyDestinations after idle circuits are evicted.
func WithMaxDestinations(n int) Option {
	return func(r *Registry) error {
		if n <= 0 {
			return fmt.Errorf("registry: WithMaxDestinations(%d): the cap must be positive", n)
		}
		r.maxDestinations = n
		return nil
	}
}

// WithIdleEviction lets the registry drop a closed circuit, with no override and
// nothing in flight, that has not been used for d. Eviction runs when the registry
// creates a circuit (at most every d/2) and whenever EvictIdle is called; no
// goroutine is started. An evicted destination gets a fresh circuit on next use.
func WithIdleEviction(d time.Duration) Option {
	return func(r *Registry) error {
		if d <= 0 {
			return fmt.Errorf("registry: WithIdleEviction(%v): the idle time must be positive", d)
		}
		r.idle = d
		return nil
	}
}

// WithCircuitFactory makes the circuits of destinations whose circuit policy has
// scope s.
func WithCircuitFactory(s breaker.Scope, f Factory) Option {
	return func(r *Registry) error {
		if f == nil {
			return fmt.Errorf("registry: WithCircuitFactory(%v): nil factory", s)
		}
		r.factories[s] = f
		return nil
	}
}

// WithClock sets the clock of the registry, of the local circuits it creates and of
// their admission control.
func WithClock(c breaker.Clock) Option {
	return func(r *Registry) error {
		r.clock = c
		r.breakerOpts = append(r.breakerOpts, breaker.WithClock(c))
		return nil
	}
}

// WithObserver is told every transition of the circuits the registry creates, with
// their destination: local circuits, and shared ones whose factory's circuits accept
// observers (Redis, DynamoDB and file circuits do; a shared transition is reported
// by the replica that made it). It runs outside the circuits' locks.
func WithObserver(f func(transport.Destination, breaker.Transition)) Option {
	return func(r *Registry) error {
		r.observers = append(r.observers, f)
		return nil
	}
}

// WithBypassHook is told, with its destination, every call that a Shadow or FailOpen
// circuit admitted although Enforce would have refused it (see breaker.Mode), and
// every call a Shadow circuit's admission control would have refused (Bypass.Err is
// then the *admission.LimitError or *admission.ThrottleError). Use it as the audit trail of FailOpen
// destinations.
func WithBypassHook(f func(transport.Destination, breaker.Bypass)) Option {
	return func(r *Registry) error {
		r.bypassHooks = append(r.bypassHooks, f)
		return nil
	}
}

// WithBreakerOptions passes options to every local circuit the registry creates.
func WithBreakerOptions(opts ...breaker.Option) Option {
	return func(r *Registry) error {
		r.breakerOpts = append(r.breakerOpts, opts...)
		return nil
	}
}

// Registry holds one circuit per destination, with the admission control of this
// process's calls to it. It is safe for concurrent use.
type Registry struct {
	defaults        Policy
	overrides       map[transport.Destination]Policy
	factories       map[breaker.Scope]Factory
	maxDestinations int
	idle            time.Duration
	clock           breaker.Clock
	breakerOpts     []breaker.Option
	observers       []func(transport.Destination, breaker.Transition)
	bypassHooks     []func(transport.Destination, breaker.Bypass)
	countCalls      bool
	partPolicy      PartitionPolicy // see partition.go
	pol             policies        // the policy set in force and its history (policyset.go)

	// Lookups read an immutable map without locking. New circuits go to fresh, under
	// mu, and fresh is merged into a new immutable map once lookups that missed it have
	// paid for the copy: amortized O(1) per circuit, and no lock once traffic settles.
	circuits atomic.Pointer[map[transport.Destination]*entry]

	mu        sync.Mutex // serializes creation, promotion and eviction; guards the fields below
	fresh     map[transport.Destination]*entry
	misses    int
	lastSweep time.Time
}

type entry struct {
	dest      transport.Destination
	circuit   breaker.Circuit
	adm       *admission.Limiter           // this process's adaptive limit; nil when the policy has none
	thr       *admission.Throttle          // this process's adaptive throttle; nil when the policy has none
	onBypass  func(breaker.Bypass)         // set when the circuit's Mode is Shadow: admission refusals are watched, not enforced (permit.go)
	minBudget time.Duration                // the policy's MinCallBudget, normalized
	used      atomic.Bool                  // set by use, cleared by each eviction sweep
	failing   atomic.Bool                  // the last call ended with a verdict did not succeed: eviction keeps the entry (limit.go)
	idleAt    time.Time                    // when a sweep first found it unused; guarded by Registry.mu
	calls     *callCounts                  // nil unless WithCallCounts
	unusable  atomic.Pointer[unusableNote] // set while calls say the destination is unusable (unusable.go)
	parts     atomic.Pointer[Partitions]   // nil until an adapter asks (partition.go)
	adopted   bool                         // made outside the registry and never evicted (Adopt)
}

// New returns a registry whose destinations get the defaults policy unless an
// override names them. Invalid policies and options fail here, naming what is wrong;
// so does a circuit that would never open (FailureThreshold 0) unless it says
// Disabled. Build one registry at start-up and share it: its circuits are what
// remember a destination's failures from one call to the next.
//
//	reg, err := registry.New(registry.DefaultPolicy())
func New(defaults Policy, opts ...Option) (*Registry, error) {
	if err := option.NoNil[Registry]("registry: New", opts); err != nil {
		return nil, err
	}
	if err := defaults.Validate(); err != nil {
		return nil, fmt.Errorf("registry: default policy: %w", err)
	}
	r := &Registry{
		defaults:        defaults,
		overrides:       map[transport.Destination]Policy{},
		factories:       map[breaker.Scope]Factory{},
		maxDestinations: DefaultMaxDestinations,
		fresh:           map[transport.Destination]*entry{},
	}
	r.circuits.Store(&map[transport.Destination]*entry{})
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	for d, p := range r.policies() {
		if s := p.Circuit.Scope; s != breaker.LocalProcess && r.factories[s] == nil {
			return nil, fmt.Errorf("registry: policy for %s has scope %v but no circuit factory provides it (use WithCircuitFactory)", d, s)
		}
	}
	r.initPolicies()
	return r, nil
}

// policies lists the defaults and the overrides.
func (r *Registry) policies() map[string]Policy {
	all := map[string]Policy{"the default policy": r.defaults}
	for d, p := range r.overrides {
		all[d.String()] = p
	}
	return all
}

// Policy returns the policy destination d gets.
func (r *Registry) Policy(d transport.Destination) Policy {
	return r.pol.active.Load().Set.policy(d)
}

func (r *Registry) now() time.Time {
	if r.clock != nil {
		return r.clock.Now()
	}
	return time.Now()
}

// Circuit returns the circuit of destination d, creating it on first use. It fails for
// an invalid destination, a factory error, or when the cap is reached.
func (r *Registry) Circuit(d transport.Destination) (breaker.Circuit, error) {
	e, err := r.entry(d)
	if err != nil {
		return nil, err
	}
	return e.circuit, nil
}

func (r *Registry) entry(d transport.Destination) (*entry, error) {
	if e, ok := (*r.circuits.Load())[d]; ok {
		if r.idle > 0 && !e.used.Load() { // write only when the flag changes
			e.used.Store(true)
		}
		return e, nil
	}
	return r.entrySlow(d)
}

func (r *Registry) entrySlow(d transport.Destination) (*entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := (*r.circuits.Load())[d]; ok { // promoted while we waited
		return e, nil
	}
	if e, ok := r.fresh[d]; ok {
		e.used.Store(true)
		if r.misses++; r.misses >= len(r.fresh) {
			r.promoteLocked()
		}
		return e, nil
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if r.idle > 0 && (r.lenLocked() >= r.maxDestinations || r.now().Sub(r.lastSweep) >= r.idle/2) {
		r.evictLocked()
	}
	if n := r.lenLocked(); n >= r.maxDestinations {
		return nil, fmt.Errorf("%w: %d live circuits, cannot add %s", ErrTooManyDestinations, n, d)
	}
	p := r.Policy(d)
	e := r.newEntry(d, p, nil, false)
	c, err := r.newCircuit(d, p.Circuit, r.observe(d, p.Admission.Enabled()))
	if err != nil {
		return nil, fmt.Errorf("registry: circuit for %s: %w", d, err)
	}
	e.circuit = c
	if r.countCalls {
		e.calls = new(callCounts)
	}
	e.used.Store(true)
	r.fresh[d] = e
	return e, nil
}

// promoteLocked publishes a new immutable map holding every live entry. Requires r.mu.
func (r *Registry) promoteLocked() {
	read := *r.circuits.Load()
	next := make(map[transport.Destination]*entry, len(read)+len(r.fresh))
	for d, e := range read {
		next[d] = e
	}
	for d, e := range r.fresh {
		next[d] = e
	}
	r.circuits.Store(&next)
	r.fresh = map[transport.Destination]*entry{}
	r.misses = 0
}

func (r *Registry) lenLocked() int { return len(*r.circuits.Load()) + len(r.fresh) }

// entries lists every live entry.
func (r *Registry) entries() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	read := *r.circuits.Load()
	out := make([]*entry, 0, len(read)+len(r.fresh))
	for _, e := range read {
		out = append(out, e)
	}
	for _, e := range r.fresh {
		out = append(out, e)
	}
	return out
}

// newCircuit makes d's circuit under policy p, observed by observe when not nil.
func (r *Registry) newCircuit(d transport.Destination, p breaker.Policy, observe func(breaker.Transition)) (breaker.Circuit, error) {
	if p.Scope != breaker.LocalProcess {
		c, err := r.factories[p.Scope](d, p)
		if err != nil {
			return nil, err
		}
		// A shared circuit that can be observed reports to the registry's observers
		// (telemetry, the admin journal) like a local one. The key makes attaching
		// again (a factory that hands back the circuit of an evicted destination)
		// replace the earlier observer, so each transition is reported once.
		if o, ok := c.(observable); ok && observe != nil {
			o.Observe(observerKey{r, d}, observe)
		}
		return c, nil
	}
	opts := r.breakerOpts[:len(r.breakerOpts):len(r.breakerOpts)] // appends must not share the backing array
	if observe != nil {
		opts = append(opts, breaker.WithObserver(observe))
	}
	if len(r.bypassHooks) > 0 {
		opts = append(opts, breaker.WithBypassHook(r.bypassed(d)))
	}
	return breaker.New(d.String(), p, opts...)
}

// bypassed returns the function that tells the registry's bypass hooks of d's bypasses.
func (r *Registry) bypassed(d transport.Destination) func(breaker.Bypass) {
	return func(b breaker.Bypass) {
		for _, f := range r.bypassHooks {
			f(d, b)
		}
	}
}

// observable is a circuit from a factory that accepts observers after creation, as
// the shared backends' circuits do (sharedstate.Circuit.Observe): an observer added
// under a key replaces the one added earlier under the same key.
type observable interface {
	Observe(key any, f func(breaker.Transition))
}

// observerKey is the key under which a registry observes a factory-made circuit.
type observerKey struct {
	r *Registry
	d transport.Destination
}

// observe returns the function that reports d's transitions to the registry's
// observers and tells d's admission control when the circuit recovers from an outage
// (admission.Limiter.Recovered, admission.Throttle.Recovered), which it looks up
// when told, since a policy change may have replaced them (policyset.go); nil when
// there is nobody to tell: no observers, and no admission control (adm false) when
// the circuit is made.
func (r *Registry) observe(d transport.Destination, adm bool) func(breaker.Transition) {
	if len(r.observers) == 0 && !adm {
		return nil
	}
	return func(t breaker.Transition) {
		if t.Reason == breaker.ReasonProbeSucceeded {
			if e, ok := r.lookup(d); ok {
				if e.adm != nil {
					e.adm.Recovered()
				}
				e.thr.Recovered()
			}
		}
		for _, f := range r.observers {
			f(d, t)
		}
	}
}

// EvictIdle drops the circuits that WithIdleEviction allows to drop and returns how
// many it dropped. Without WithIdleEviction it does nothing.
func (r *Registry) EvictIdle() int {
	if r.idle <= 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.evictLocked()
}

// evictLocked requires r.mu held.
func (r *Registry) evictLocked() int {
	now := r.now()
	r.lastSweep = now
	r.promoteLocked() // one map to sweep, rebuilt once below if anything goes
	read := *r.circuits.Load()
	var gone []transport.Destination
	for d, e := range read {
		if e.used.Swap(false) || e.idleAt.IsZero() {
			e.idleAt = now
			continue
		}
		if now.Sub(e.idleAt) >= r.idle && !e.adopted && e.evictable() {
			gone = append(gone, d)
		}
	}
	if len(gone) > 0 {
		next := make(map[transport.Destination]*entry, len(read)-len(gone))
		for d, e := range read {
			next[d] = e
		}
		for _, d := range gone {
			delete(next, d)
		}
		r.circuits.Store(&next)
	}
	return len(gone)
}

// Lookup returns the live circuit of destination d without creating one: what an
// operator's tool wants, where a typo must not add a circuit.
func (r *Registry) Lookup(d transport.Destination) (breaker.Circuit, bool) {
	if e, ok := r.lookup(d); ok {
		return e.circuit, true
	}
	return nil, false
}

// Len returns the number of live circuits.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lenLocked()
}

// Snapshots returns a snapshot of every live circuit.
func (r *Registry) Snapshots() map[transport.Destination]breaker.Snapshot {
	out := map[transport.Destination]breaker.Snapshot{}
	for _, e := range r.entries() {
		out[e.dest] = e.snapshot()
	}
	return out
}

// IsAnyOpen reports whether any live circuit is open or half-open.
func (r *Registry) IsAnyOpen() bool {
	for _, e := range r.entries() {
		if e.circuit.Snapshot().State != breaker.Closed {
			return true
		}
	}
	return false
}

// FailureCount returns the sum of the live circuits' current failure evidence.
func (r *Registry) FailureCount() int {
	n := 0
	for _, e := range r.entries() {
		n += e.circuit.Snapshot().Failures
	}
	return n
}
