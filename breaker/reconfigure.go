package breaker

import (
	"fmt"
	"reflect"

	"github.com/brokerguard/brokerguard/internal/window"
)

// A circuit's policy can be replaced while it runs (Reconfigure). What the circuit
// knows survives the change: its state, generation, open deadline, probes, the
// permits it handed out and its failure evidence. Only a change of the evidence's
// shape (the counting mode, or the window's length) restarts the counts, because
// counts gathered in one shape mean nothing in another; and a change of
// SlowCallDuration restarts the slow-call evidence, whose baseline was learned
// against the old duration. A change never opens a circuit by itself: opening takes a
// failure, and the change is not one. It closes one only when the new policy
// disables the circuit (FailureThreshold 0), since a disabled circuit is never open.

// ReasonPolicyChanged is the Transition.Reason of a policy change (Reconfigure). The
// transition leaves the state as it was (From == To, same generation) unless the new
// policy disables an open or half-open circuit, which closes it in a new generation.
const ReasonPolicyChanged = "policy_changed"

// config is the policy in force, with what the hot path derives from it. It is
// replaced whole, never modified, so that readers without the lock see one policy.
type config struct {
	policy   Policy // normalized
	counting bool   // the circuit can open
	windowed bool   // counting in a trailing window rather than consecutively
}

func newConfig(p Policy) *config {
	return &config{policy: p.normalized(), counting: p.FailureThreshold > 0, windowed: p.FailureThreshold > 0 && p.FailureWindow > 0}
}

func (b *Breaker) conf() *config { return b.cfg.Load() }

// FieldChange is one policy field a change alters, its values written with fmt.
type FieldChange struct {
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
}

// Change says what replacing a circuit's policy does, or would do (PlanChange).
type Change struct {
	// Fields lists the policy fields that differ, in the order Policy declares them.
	Fields []FieldChange
	// RestartsCounts says the failure evidence restarts from zero: the counting mode
	// or the window's length changed. RestartsSlowCalls says the same of the slow-call
	// evidence and its baseline (SlowCallDuration changed, or the counting mode).
	RestartsCounts, RestartsSlowCalls bool
	// Closes says the change closes the circuit now: the new policy disables an open
	// or half-open circuit.
	Closes bool
	// OpensOnNextFailure says the circuit is closed and the evidence it keeps already
	// reaches the new policy's threshold, so that the next failure opens it. A change
	// never opens a circuit by itself.
	OpensOnNextFailure bool
}

// Empty reports whether the change alters nothing.
func (c Change) Empty() bool { return len(c.Fields) == 0 }

// PlanChange returns what replacing policy from with policy to does to a circuit
// whose snapshot is s, without changing anything. It is what Reconfigure does; a
// registry uses it for a dry run of any circuit, shared ones included.
func PlanChange(s Snapshot, from, to Policy) Change {
	from, to = from.normalized(), to.normalized()
	c := Change{Fields: diffPolicies(from, to)}
	fc, tc := newConfig(from), newConfig(to)
	c.RestartsCounts = fc.counting && tc.counting &&
		(fc.windowed != tc.windowed || tc.windowed && from.FailureWindow != to.FailureWindow)
	c.RestartsSlowCalls = from.SlowCallDuration != to.SlowCallDuration || c.RestartsCounts
	c.Closes = !tc.counting && s.State != Closed && s.Override == NoOverride
	if s.State != Closed || s.Override != NoOverride || !tc.counting {
		return c
	}
	f, n := int64(s.Failures)+1, int64(s.Calls)+1
	if c.RestartsCounts || !fc.counting {
		f, n = 1, 1
	}
	if !tc.windowed {
		c.OpensOnNextFailure = f >= int64(to.FailureThreshold)
		return c
	}
	c.OpensOnNextFailure = f >= int64(to.FailureThreshold) && n >= int64(to.MinimumCalls) &&
		(to.FailureRatio == 0 || float64(f) >= to.FailureRatio*float64(n))
	return c
}

// diffPolicies lists the fields whose values differ between a and b, in the order
// Policy declares them.
func diffPolicies(a, b Policy) []FieldChange {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []FieldChange
	for i := range va.NumField() {
		x, y := va.Field(i), vb.Field(i)
		if !x.Equal(y) {
			out = append(out, FieldChange{Field: va.Type().Field(i).Name, From: fmt.Sprint(x.Interface()), To: fmt.Sprint(y.Interface())})
		}
	}
	return out
}

// PlanPolicy returns what Reconfigure(p) would do now, or the error it would return.
func (b *Breaker) PlanPolicy(p Policy) (Change, error) {
	if err := b.checkPolicy(p); err != nil {
		return Change{}, err
	}
	return PlanChange(b.Snapshot(), b.Policy(), p), nil
}

func (b *Breaker) checkPolicy(p Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Scope != LocalProcess {
		return &PolicyError{Field: "Scope", Reason: "is " + p.Scope.String() + ", which a local breaker cannot provide; a circuit keeps its scope"}
	}
	return nil
}

// Reconfigure replaces the circuit's policy and returns what the change did (see
// PlanChange), or an error naming the policy field that is wrong; on error nothing
// changes. The circuit keeps its state, generation and open deadline: permits handed
// out before the change complete into the generation that admitted them, and a
// ramp in progress keeps its pace (the new RampDuration applies from the next
// recovery). Observers are told with a ReasonPolicyChanged transition.
func (b *Breaker) Reconfigure(p Policy) (Change, error) {
	if err := b.checkPolicy(p); err != nil {
		return Change{}, err
	}
	b.mu.Lock()
	ph, now := b.cur.Load(), b.now()
	old := b.conf()
	nc := newConfig(p)
	s := Snapshot{State: ph.state, Override: ph.override}
	ev := b.evidence(ph, now)
	s.Failures, s.Calls = int(ev.Failures), int(ev.Calls)
	c := PlanChange(s, old.policy, nc.policy)
	if c.Empty() {
		b.mu.Unlock()
		return c, nil
	}
	b.cfg.Store(nc)
	restart := c.RestartsCounts || old.windowed != nc.windowed
	if nc.windowed && (restart || b.win == nil) {
		b.win = window.New(int64(nc.policy.FailureWindow))
		b.win.Reset(now)
	}
	if !nc.windowed {
		b.win = nil
	}
	if c.RestartsSlowCalls || nc.windowed && (b.slowWin == nil) != (nc.policy.SlowCallDuration == 0) {
		b.slowWin = nil
		if nc.windowed && nc.policy.SlowCallDuration > 0 {
			b.slowWin = window.New(int64(nc.policy.FailureWindow))
		}
		b.slow.fast.Store(0)
		b.slow.readyAt.Store(0)
		b.slow.run.Store(0)
	}
	if c.Closes {
		b.failedProbes, b.errorProbes = 0, 0
		b.enter(ph, b.closedPhase(ph.gen+1, now, NoOverride, 0), now, ReasonPolicyChanged)
	} else {
		b.enter(ph, b.samePhase(ph, nc, now, restart), now, ReasonPolicyChanged)
	}
	b.mu.Unlock()
	b.events.Flush()
	return c, nil
}

// samePhase is ph under the config nc: the same generation, state, deadline,
// rejection, probes and ramp, with the hot-path flags derived again; restart drops
// the failure evidence. Requires b.mu held.
func (b *Breaker) samePhase(ph *phase, nc *config, now int64, restart bool) *phase {
	np := &phase{
		b: b, gen: ph.gen, state: ph.state, override: ph.override, deadline: ph.deadline,
		reject: ph.reject, frozen: ph.frozen, ramp: ph.ramp, rampStart: ph.rampStart, rampEnd: ph.rampEnd,
		probes: append([]probe(nil), ph.probes...), successes: ph.successes, missed: ph.missed,
	}
	if ph.state == Closed {
		p := nc.policy
		np.plain = ph.override == NoOverride && p.MaxInFlight == 0 && p.SlowCallDuration == 0
		np.plainSuccess = np.plain && !nc.windowed
		np.admitAll.Store(np.plain && (np.ramp == nil || now >= np.rampEnd))
	}
	if restart {
		np.frozen = window.Counts{}
	} else {
		np.failures.Store(ph.failures.Load())
	}
	return np
}

// live returns the live phase that takes the outcomes of ph's permits: ph itself, or
// the phase a policy change put in its place in the same generation; nil when the
// generation has ended.
func (b *Breaker) live(ph *phase) *phase {
	if cur := b.cur.Load(); cur == ph || cur.gen == ph.gen {
		return cur
	}
	return nil
}
