package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/transport"
)

// Policies are data: the default policy and the overrides given to New form version 1
// of the registry's policy set, and ApplyPolicies replaces the whole set while the
// registry runs. Each change gets the next version, with its author and reason, and
// is kept in a short history for RollbackPolicies. Circuits keep what they know
// (breaker.Breaker.Reconfigure): a change of thresholds or durations keeps an open
// circuit's deadline and the counts; only a change of the evidence's shape restarts
// the counts, and PlanPolicies says so, per destination and field, before anything
// changes. A change of a destination's Admission restarts its admission control (its
// learned limit), and says so too.

// DefaultPolicyHistory is how many versions a registry keeps unless
// WithPolicyHistory says otherwise.
const DefaultPolicyHistory = 10

// PolicySet is every policy a registry applies: the default, and the overrides keyed
// exactly as Destination.String() spells them ("kafka:orders").
type PolicySet struct {
	Default   Policy
	Overrides map[string]Policy
}

// policy returns the policy d gets under s.
func (s PolicySet) policy(d transport.Destination) Policy {
	if p, ok := s.Overrides[d.String()]; ok {
		return p
	}
	return s.Default
}

// Validate applies registry.New's rules: every policy valid, every override key a
// valid destination. Errors name the destination and the field.
func (s PolicySet) Validate() error {
	if err := s.Default.Validate(); err != nil {
		return fmt.Errorf("registry: default policy: %w", err)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Overrides)) {
		if _, err := transport.ParseDestination(k); err != nil {
			return fmt.Errorf("registry: override %q: %w", k, err)
		}
		if err := s.Overrides[k].Validate(); err != nil {
			return fmt.Errorf("registry: override %q: %w", k, err)
		}
	}
	return nil
}

// Fingerprint is a short digest of the set: replicas that show the same fingerprint
// apply the same policies.
func (s PolicySet) Fingerprint() string {
	b, _ := json.Marshal(s) // maps marshal in key order: the digest is stable
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// clone copies the overrides so that the caller's map cannot change a version.
func (s PolicySet) clone() PolicySet {
	s.Overrides = maps.Clone(s.Overrides)
	if s.Overrides == nil {
		s.Overrides = map[string]Policy{}
	}
	return s
}

// PolicyVersion is one version of a registry's policy set.
type PolicyVersion struct {
	Version     uint64    `json:"version"`
	Set         PolicySet `json:"set"`
	Fingerprint string    `json:"fingerprint"`
	Author      string    `json:"author"`
	Reason      string    `json:"reason"`
	At          time.Time `json:"at"` // when it was applied
	// Expires, when not zero, is when the registry reverts by itself to the set of
	// version Reverts (the one it replaced).
	Expires time.Time `json:"expires,omitzero"`
	Reverts uint64    `json:"reverts,omitzero"`
}

// PolicyChange asks for a new policy set.
type PolicyChange struct {
	Set    PolicySet
	Author string // who asks: required
	Reason string // why: required
	// Expires, when not zero, makes the change temporary: at that time the registry
	// goes back to the set in force before it (as a new version).
	Expires time.Time
}

// PolicyPlan is what a policy change does, or would do (PlanPolicies).
type PolicyPlan struct {
	From         uint64                `json:"from"` // the version in force
	To           uint64                `json:"to"`   // the version the change makes
	Default      []breaker.FieldChange `json:"default"`
	Destinations []DestinationPlan     `json:"destinations"` // sorted by destination
}

// DestinationPlan is what a change does to one destination: one with an override in
// either set, or one with a live circuit whose policy changes.
type DestinationPlan struct {
	Destination string `json:"destination"`
	// Fields are the differences of the destination's policy, named as a Go
	// selector from Policy ("Circuit.FailureThreshold", "Admission.Limit.Max").
	Fields []breaker.FieldChange `json:"fields"`
	// Live says the destination has a circuit now, in State; the rest is about that
	// circuit (breaker.PlanChange): counts restarted, closed now, or opened by its
	// next failure.
	Live               bool          `json:"live"`
	State              breaker.State `json:"-"`
	RestartsCounts     bool          `json:"restarts_counts,omitzero"`
	RestartsSlowCalls  bool          `json:"restarts_slow_calls,omitzero"`
	Closes             bool          `json:"closes,omitzero"`
	OpensOnNextFailure bool          `json:"opens_on_next_failure,omitzero"`
	// RestartsAdmission says the destination's admission control starts afresh.
	RestartsAdmission bool `json:"restarts_admission,omitzero"`
}

// PolicyEvent reports a change of the policy set to WithPolicyHook.
type PolicyEvent struct {
	Action  string // "apply", "rollback" or "expire"
	Version PolicyVersion
	Plan    PolicyPlan
}

// ErrPolicyVersion is returned (wrapped) by RollbackPolicies for a version the
// registry does not keep.
var ErrPolicyVersion = errors.New("registry: no such policy version")

// WithPolicyHistory keeps the last n versions (default DefaultPolicyHistory).
func WithPolicyHistory(n int) Option {
	return func(r *Registry) error {
		if n <= 0 {
			return fmt.Errorf("registry: WithPolicyHistory(%d): must be positive", n)
		}
		r.pol.keep = n
		return nil
	}
}

// WithPolicyHook is told every change of the policy set, after it is in force,
// outside the registry's locks. It must not change policies itself. The admin
// handler and telemetry use it for the audit trail and the version metric.
func WithPolicyHook(f func(PolicyEvent)) Option {
	return func(r *Registry) error {
		r.pol.hooks = append(r.pol.hooks, f)
		return nil
	}
}

// policies is a registry's policy set and its history.
type policies struct {
	active atomic.Pointer[PolicyVersion] // read without locking on the call path
	keep   int
	hooks  []func(PolicyEvent)

	mu      sync.Mutex // serializes changes; guards history
	history []PolicyVersion
}

// initPolicies makes New's policies version 1.
func (r *Registry) initPolicies() {
	set := PolicySet{Default: r.defaults, Overrides: map[string]Policy{}}
	for d, p := range r.overrides {
		set.Overrides[d.String()] = p
	}
	v := PolicyVersion{Version: 1, Set: set, Fingerprint: set.Fingerprint(), Author: "registry.New", Reason: "start", At: r.now()}
	if r.pol.keep == 0 {
		r.pol.keep = DefaultPolicyHistory
	}
	r.pol.history = []PolicyVersion{v}
	r.pol.active.Store(&v)
}

// Policies returns the version in force, after reverting an expired one
// (ExpirePolicies).
func (r *Registry) Policies() PolicyVersion {
	r.ExpirePolicies()
	return *r.pol.active.Load()
}

// PolicyVersion returns the version in force without looking at its expiry: what a
// metric reads.
func (r *Registry) PolicyVersion() uint64 { return r.pol.active.Load().Version }

// PolicyHistory returns the versions kept, newest first.
func (r *Registry) PolicyHistory() []PolicyVersion {
	r.ExpirePolicies()
	r.pol.mu.Lock()
	defer r.pol.mu.Unlock()
	out := slices.Clone(r.pol.history)
	slices.Reverse(out)
	return out
}

// PlanPolicies returns what ApplyPolicies(set) would do now, changing nothing, or the
// error it would return.
func (r *Registry) PlanPolicies(set PolicySet) (PolicyPlan, error) {
	r.ExpirePolicies()
	r.pol.mu.Lock()
	defer r.pol.mu.Unlock()
	set = set.clone()
	if err := r.checkSet(set); err != nil {
		return PolicyPlan{}, err
	}
	return r.plan(*r.pol.active.Load(), set), nil
}

// ApplyPolicies puts ch.Set in force as the next version and returns it with what it
// did. The set is refused, changing nothing, when registry.New would refuse it, when
// it would change the scope of a live circuit, or the circuit policy of a live shared
// circuit (those cannot change policy while running); the error names the
// destination and the field. Live circuits keep their state (see PolicyPlan).
func (r *Registry) ApplyPolicies(ch PolicyChange) (PolicyVersion, PolicyPlan, error) {
	if ch.Author == "" || ch.Reason == "" {
		return PolicyVersion{}, PolicyPlan{}, errors.New("registry: a policy change needs an Author and a Reason")
	}
	r.ExpirePolicies()
	r.pol.mu.Lock()
	defer r.pol.mu.Unlock()
	cur := *r.pol.active.Load()
	if !ch.Expires.IsZero() && !ch.Expires.After(r.now()) {
		return PolicyVersion{}, PolicyPlan{}, fmt.Errorf("registry: a policy change expiring at %v: Expires is not in the future", ch.Expires)
	}
	v, plan, err := r.applyLocked(ch.Set, ch.Author, ch.Reason)
	if err == nil && !ch.Expires.IsZero() {
		v.Expires, v.Reverts = ch.Expires, cur.Version
		r.pol.history[len(r.pol.history)-1] = v
		r.pol.active.Store(&v)
	}
	r.tell(PolicyEvent{Action: "apply", Version: v, Plan: plan}, err)
	return v, plan, err
}

// RollbackPolicies puts the set of a version kept in the history back in force, as
// the next version.
func (r *Registry) RollbackPolicies(version uint64, author, reason string) (PolicyVersion, PolicyPlan, error) {
	if author == "" || reason == "" {
		return PolicyVersion{}, PolicyPlan{}, errors.New("registry: a rollback needs an author and a reason")
	}
	r.ExpirePolicies()
	r.pol.mu.Lock()
	defer r.pol.mu.Unlock()
	old, ok := r.versionLocked(version)
	if !ok {
		return PolicyVersion{}, PolicyPlan{}, fmt.Errorf("%w: %d (kept: the last %d)", ErrPolicyVersion, version, r.pol.keep)
	}
	v, plan, err := r.applyLocked(old.Set, author, reason)
	r.tell(PolicyEvent{Action: "rollback", Version: v, Plan: plan}, err)
	return v, plan, err
}

// ExpirePolicies reverts a temporary version whose Expires has passed to the set it
// replaced, as the next version, and reports whether it did. Every policy method
// calls it first; a service that changes policies with an expiry and wants the
// revert on time without reading them calls it from a ticker (or runs a
// PolicyFile, which does).
func (r *Registry) ExpirePolicies() bool {
	cur := r.pol.active.Load()
	if cur.Expires.IsZero() || r.now().Before(cur.Expires) {
		return false
	}
	// A change in progress holds the lock and may be telling observers who read the
	// policies: they must not wait for it. The next read reverts.
	if !r.pol.mu.TryLock() {
		return false
	}
	defer r.pol.mu.Unlock()
	cur = r.pol.active.Load()
	if cur.Expires.IsZero() || r.now().Before(cur.Expires) {
		return false // another caller reverted it
	}
	set := r.pol.history[0].Set // the oldest kept, should the one it replaced be gone
	if old, ok := r.versionLocked(cur.Reverts); ok {
		set = old.Set
	}
	v, plan, err := r.applyLocked(set, "expiry", fmt.Sprintf("version %d expired; back to version %d's set", cur.Version, cur.Reverts))
	if err != nil {
		// The old set no longer fits the live circuits: keep the current one, without
		// an expiry that would fail again at every call.
		cleared := *cur
		cleared.Expires = time.Time{}
		r.pol.history[len(r.pol.history)-1] = cleared
		r.pol.active.Store(&cleared)
	}
	r.tell(PolicyEvent{Action: "expire", Version: v, Plan: plan}, err)
	return err == nil
}

func (r *Registry) versionLocked(version uint64) (PolicyVersion, bool) {
	for _, v := range r.pol.history {
		if v.Version == version {
			return v, true
		}
	}
	return PolicyVersion{}, false
}

// tell runs the policy hooks, outside the registry's locks but for pol.mu, which
// keeps them in version order.
func (r *Registry) tell(ev PolicyEvent, err error) {
	if err != nil {
		return
	}
	for _, f := range r.pol.hooks {
		f(ev)
	}
}

// checkSet applies New's rules to set, and refuses what live circuits cannot take.
// Requires r.pol.mu held.
func (r *Registry) checkSet(set PolicySet) error {
	if err := set.Validate(); err != nil {
		return err
	}
	scopes := map[string]Policy{"the default policy": set.Default}
	for k, p := range set.Overrides {
		scopes[k] = p
	}
	for _, k := range slices.Sorted(maps.Keys(scopes)) {
		if s := scopes[k].Circuit.Scope; s != breaker.LocalProcess && r.factories[s] == nil {
			return fmt.Errorf("registry: policy for %s: Circuit.Scope is %v but no circuit factory provides it (use WithCircuitFactory)", k, s)
		}
	}
	for _, e := range r.entries() {
		from, to := r.Policy(e.dest).Circuit, set.policy(e.dest).Circuit
		if from.Scope != to.Scope {
			return fmt.Errorf("registry: policy for %s: Circuit.Scope cannot change from %v to %v while its circuit is live", e.dest, from.Scope, to.Scope)
		}
		if _, ok := e.circuit.(reconfigurable); ok {
			continue
		}
		if diff := diffValues("Circuit.", reflect.ValueOf(backend.Normalize(from)), reflect.ValueOf(backend.Normalize(to)), nil); len(diff) > 0 {
			return fmt.Errorf("registry: policy for %s: %s cannot change while its %v circuit is live", e.dest, diff[0].Field, from.Scope)
		}
	}
	return nil
}

// reconfigurable is a circuit whose policy can change while it runs, as the local
// breaker's can (breaker.Breaker.Reconfigure).
type reconfigurable interface {
	Reconfigure(p breaker.Policy) (breaker.Change, error)
}

// plan compares the set in force with set. Requires r.pol.mu held.
func (r *Registry) plan(cur PolicyVersion, set PolicySet) PolicyPlan {
	pl := PolicyPlan{From: cur.Version, To: cur.Version + 1, Default: diffPolicy(cur.Set.Default, set.Default)}
	rows := map[string]*DestinationPlan{}
	row := func(k string, from, to Policy) *DestinationPlan {
		f := diffPolicy(from, to)
		if len(f) == 0 {
			return nil
		}
		dp := &DestinationPlan{Destination: k, Fields: f, RestartsAdmission: from.Admission != to.Admission}
		rows[k] = dp
		return dp
	}
	for _, e := range r.entries() {
		from, to := cur.Set.policy(e.dest), set.policy(e.dest)
		dp := row(e.dest.String(), from, to)
		if dp == nil {
			continue
		}
		s := e.circuit.Snapshot()
		c := breaker.PlanChange(s, from.Circuit, to.Circuit)
		dp.Live, dp.State = true, s.State
		dp.RestartsCounts, dp.RestartsSlowCalls, dp.Closes, dp.OpensOnNextFailure = c.RestartsCounts, c.RestartsSlowCalls, c.Closes, c.OpensOnNextFailure
	}
	for _, k := range slices.Concat(slices.Collect(maps.Keys(cur.Set.Overrides)), slices.Collect(maps.Keys(set.Overrides))) {
		if _, ok := rows[k]; !ok {
			d, _ := transport.ParseDestination(k)
			row(k, cur.Set.policy(d), set.policy(d))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		pl.Destinations = append(pl.Destinations, *rows[k])
	}
	return pl
}

// applyLocked puts set in force as the next version. Requires r.pol.mu held.
func (r *Registry) applyLocked(set PolicySet, author, reason string) (PolicyVersion, PolicyPlan, error) {
	set = set.clone()
	if err := r.checkSet(set); err != nil {
		return PolicyVersion{}, PolicyPlan{}, err
	}
	cur := *r.pol.active.Load()
	plan := r.plan(cur, set)
	v := PolicyVersion{Version: cur.Version + 1, Set: set, Fingerprint: set.Fingerprint(), Author: author, Reason: reason, At: r.now()}

	// The set and the entries change together under r.mu, so that a circuit created
	// meanwhile gets the new policy; the circuits change after, outside it, since
	// they tell observers.
	r.mu.Lock()
	r.pol.active.Store(&v)
	r.promoteLocked()
	read := *r.circuits.Load()
	next := make(map[transport.Destination]*entry, len(read))
	var changed []*entry
	for d, e := range read {
		from, to := cur.Set.policy(d), set.policy(d)
		if from.Admission != to.Admission || from.minCallBudget() != to.minCallBudget() || from.Circuit.Mode != to.Circuit.Mode {
			e = r.newEntry(d, to, e, from.Admission == to.Admission)
		}
		next[d] = e
		if from != to {
			changed = append(changed, e)
		}
	}
	r.circuits.Store(&next)
	r.mu.Unlock()

	r.pol.history = append(r.pol.history, v)
	if n := len(r.pol.history) - r.pol.keep; n > 0 {
		r.pol.history = slices.Delete(r.pol.history, 0, n)
	}
	for _, e := range changed {
		from, to := cur.Set.policy(e.dest).Circuit, set.policy(e.dest).Circuit
		if rc, ok := e.circuit.(reconfigurable); ok && from != to {
			if _, err := rc.Reconfigure(to); err == nil {
				continue // the circuit told the observers itself
			}
		}
		// Nothing in the circuit changed (admission, the deadline rule): the
		// observers hear of the change all the same.
		s := e.circuit.Snapshot()
		for _, f := range r.observers {
			f(e.dest, breaker.Transition{Identity: e.dest.String(), From: s.State, To: s.State, Generation: s.Generation, At: v.At, Reason: breaker.ReasonPolicyChanged})
		}
	}
	return v, plan, nil
}

// diffPolicy lists the fields of a registry policy that differ, named as Go
// selectors from Policy ("Circuit.FailureThreshold").
func diffPolicy(a, b Policy) []breaker.FieldChange {
	return diffValues("", reflect.ValueOf(a), reflect.ValueOf(b), nil)
}

func diffValues(prefix string, a, b reflect.Value, out []breaker.FieldChange) []breaker.FieldChange {
	for i := range a.NumField() {
		x, y, name := a.Field(i), b.Field(i), prefix+a.Type().Field(i).Name
		switch {
		case x.Kind() == reflect.Struct:
			out = diffValues(name+".", x, y, out)
		case !x.Equal(y):
			out = append(out, breaker.FieldChange{Field: name, From: fmt.Sprint(x.Interface()), To: fmt.Sprint(y.Interface())})
		}
	}
	return out
}

// newEntry makes d's entry under policy p: the admission control, deadline rule and
// mode of p; with old, the circuit and records of old, and old's admission control
// when keepAdm says p's is the same. Requires r.mu held.
func (r *Registry) newEntry(d transport.Destination, p Policy, old *entry, keepAdm bool) *entry {
	var clock func() time.Time
	if r.clock != nil {
		clock = r.clock.Now
	}
	e := &entry{dest: d, minBudget: p.minCallBudget()}
	if p.Circuit.Mode == breaker.Shadow {
		e.onBypass = r.bypassed(d)
	}
	if old == nil || !keepAdm {
		e.adm = admission.NewLimiter(p.Admission.Limit, clock)
		// Policies were validated (Policy.Validate checks the throttle's), so
		// NewThrottle cannot refuse this one.
		e.thr, _ = admission.NewThrottle(p.Admission.Throttle, clock)
	} else {
		e.adm, e.thr = old.adm, old.thr
	}
	if old == nil {
		return e
	}
	e.failing.Store(old.failing.Load())
	e.circuit, e.calls, e.idleAt = old.circuit, old.calls, old.idleAt
	e.used.Store(old.used.Load())
	e.unusable.Store(old.unusable.Load())
	e.parts.Store(old.parts.Load())
	return e
}
