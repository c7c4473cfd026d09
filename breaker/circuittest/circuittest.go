// Package circuittest is the conformance suite of breaker.Circuit implementations:
// the contract of the local breaker (generations, stale completions, probes and their
// leases, NotBefore, overrides, observers, scope refusal) and, for backends that share
// one state between processes, the same contract across several replicas plus policy
// refusal and failing closed. A user writing a backend runs it from a test:
//
//	func TestConformance(t *testing.T) {
//		circuittest.Run(t, circuittest.Backend{Scope: breaker.SharedDependency, Shared: true, NewState: ...})
//	}
//
// Everything runs on a fake clock the suite owns; a backend must read time only from
// the clock it is given.
package circuittest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// Circuit is what the suite drives: a circuit with operator overrides. Backends whose
// overrides need no I/O return nil errors.
type Circuit interface {
	breaker.Circuit
	ForceOpen(ctx context.Context, until time.Time) error
	ForceClose(ctx context.Context, until time.Time) error
	ClearOverride(ctx context.Context) error
}

// Config is what the suite asks a backend to make a circuit with.
type Config struct {
	Policy   breaker.Policy // Scope is already the backend's
	Clock    breaker.Clock  // the suite's fake clock
	Observer func(breaker.Transition)
}

// Backend describes the implementation under test.
type Backend struct {
	// Scope is the scope the backend provides.
	Scope breaker.Scope
	// NewState returns a fresh, empty state for one circuit and a function that makes
	// circuits on it. For a Shared backend, circuits made by one such function are
	// replicas of one circuit; an error from it is a refusal (of a policy or scope).
	NewState func(t *testing.T) func(Config) (Circuit, error)
	// Shared says that circuits made on one state share it. MaxStaleness is then how
	// long a replica may take to see another's write (the suite moves its clock past
	// it), and Break makes the state unreachable (true) or reachable again (false).
	Shared       bool
	MaxStaleness time.Duration
	Break        func(broken bool)
	// RefuseWrites, when set, makes the shared state refuse every write while it still
	// answers reads (true), as a Redis at maxmemory under noeviction does, or take
	// writes again (false). Forget, when set, makes it forget every record, as a store
	// restarted without persistence or an evicted key. The rules for those faults
	// (storefaults.go) are skipped for a backend that cannot inject them.
	RefuseWrites func(refuse bool)
	Forget       func()
}

var t0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

// Run runs the suite against b.
func Run(t *testing.T, b Backend) {
	for _, c := range slices.Concat(contract, healthContract) {
		t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, b)) })
	}
	if !b.Shared {
		return
	}
	for _, c := range slices.Concat(sharedContract, sharedHealthContract) {
		t.Run(c.name, func(t *testing.T) { c.run(newEnv(t, b)) })
	}
}

type check struct {
	name string
	run  func(e *env)
}

// env is one test's state, clock and recorded transitions.
type env struct {
	t     *testing.T
	b     Backend
	clock *fakeclock.Clock
	make  func(Config) (Circuit, error)

	mu   sync.Mutex
	seen []breaker.Transition // of the first circuit made
}

func newEnv(t *testing.T, b Backend) *env {
	return &env{t: t, b: b, clock: fakeclock.New(t0), make: b.NewState(t)}
}

// policy is the suite's base policy: open after 3 failures for 10s, 5s probe leases.
func (e *env) policy() breaker.Policy {
	return breaker.Policy{FailureThreshold: 3, BreakDuration: 10 * time.Second, ProbeLease: 5 * time.Second,
		HalfOpenRetryDelay: time.Second, Scope: e.b.Scope}
}

// circuit makes a circuit (a replica, for shared backends) with policy p; the first
// one made records its transitions.
func (e *env) circuit(p breaker.Policy) Circuit {
	e.t.Helper()
	cfg := Config{Policy: p, Clock: e.clock}
	e.mu.Lock()
	first := e.seen == nil
	if first {
		e.seen = []breaker.Transition{}
		cfg.Observer = func(tr breaker.Transition) {
			e.mu.Lock()
			e.seen = append(e.seen, tr)
			e.mu.Unlock()
		}
	}
	e.mu.Unlock()
	c, err := e.make(cfg)
	if err != nil {
		e.t.Fatalf("making a circuit: %v", err)
	}
	return c
}

func (e *env) reasons() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, tr := range e.seen {
		out = append(out, tr.From.String()+">"+tr.To.String()+":"+tr.Reason)
	}
	return out
}

func (e *env) acquire(c Circuit) breaker.Permit {
	e.t.Helper()
	p, err := c.Acquire(context.Background())
	if err != nil {
		e.t.Fatalf("Acquire: %v (snapshot %+v)", err, c.Snapshot())
	}
	return p
}

func (e *env) reject(c Circuit) *breaker.OpenError {
	e.t.Helper()
	p, err := c.Acquire(context.Background())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) {
		if err == nil {
			p.Complete(breaker.Neutral)
		}
		e.t.Fatalf("Acquire = %v; want an *OpenError (snapshot %+v)", err, c.Snapshot())
	}
	return oe
}

func (e *env) call(c Circuit, o breaker.Outcome) {
	e.t.Helper()
	if !e.acquire(c).Complete(o) {
		e.t.Fatalf("Complete(%v) of a fresh permit = false", o)
	}
}

func (e *env) state(c Circuit, want breaker.State) breaker.Snapshot {
	e.t.Helper()
	s := c.Snapshot()
	if s.State != want {
		e.t.Fatalf("state %v; want %v (snapshot %+v)", s.State, want, s)
	}
	return s
}

// open records the threshold's failures through c and returns the open deadline.
func (e *env) open(c Circuit) time.Time {
	e.t.Helper()
	for range e.policy().FailureThreshold {
		e.call(c, breaker.Failure)
	}
	// A shared replica that wrote OPEN knows it; reject once to be sure.
	return e.reject(c).NotBefore
}

func (e *env) ctx() context.Context { return context.Background() }

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

var contract = []check{
	{"ConsecutiveFailuresOpen", func(e *env) {
		c := e.circuit(e.policy())
		e.call(c, breaker.Failure)
		e.call(c, breaker.Failure)
		e.call(c, breaker.Success) // resets the count
		e.call(c, breaker.Failure)
		e.call(c, breaker.Failure)
		e.state(c, breaker.Closed)
		e.call(c, breaker.Neutral) // counts nothing
		e.call(c, breaker.Failure)
		s := e.state(c, breaker.Open)
		if want := t0.Add(10 * time.Second); !s.NotBefore.Equal(want) {
			e.t.Fatalf("NotBefore %v; want %v", s.NotBefore, want)
		}
		if got := e.reasons(); !slices.Equal(got, []string{"closed>open:failure_threshold"}) {
			e.t.Fatalf("transitions %v", got)
		}
	}},
	{"DisabledNeverOpens", func(e *env) {
		p := e.policy()
		p.FailureThreshold, p.BreakDuration = 0, 0
		c := e.circuit(p)
		for range 20 {
			e.call(c, breaker.Failure)
		}
		e.state(c, breaker.Closed)
	}},
	{"OpenRejectsUntilDeadlineWithoutExtendingIt", func(e *env) {
		c := e.circuit(e.policy())
		late := e.acquire(c)
		deadline := e.open(c)
		gen := c.Snapshot().Generation
		e.clock.Advance(5 * time.Second)
		if oe := e.reject(c); !oe.NotBefore.Equal(deadline) {
			e.t.Fatalf("NotBefore %v moved from %v", oe.NotBefore, deadline)
		}
		if late.Complete(breaker.Failure) || late.Complete(breaker.Success) {
			e.t.Fatal("a permit of the closed generation counted after the circuit opened")
		}
		if s := c.Snapshot(); s.Generation != gen || s.State != breaker.Open {
			e.t.Fatalf("a late outcome changed the circuit: %+v", s)
		}
	}},
	{"GenerationsAndDoubleCompletion", func(e *env) {
		c := e.circuit(e.policy())
		p := e.acquire(c)
		g0 := p.Generation()
		stale := e.acquire(c) // completes after two transitions, in a new closed generation
		if !p.Complete(breaker.Failure) || p.Complete(breaker.Failure) {
			e.t.Fatal("first completion must count and the second must not")
		}
		if s := c.Snapshot(); s.Failures != 1 {
			e.t.Fatalf("a double completion counted twice: %+v", s)
		}
		e.call(c, breaker.Failure)
		e.call(c, breaker.Failure)
		e.reject(c)
		g1 := c.Snapshot().Generation
		e.clock.Advance(10 * time.Second)
		probe := e.acquire(c)
		g2 := probe.Generation()
		probe.Complete(breaker.Success)
		g3 := c.Snapshot().Generation
		if !(g0 < g1 && g1 < g2 && g2 < g3) {
			e.t.Fatalf("generations %d, %d, %d, %d do not advance with every transition", g0, g1, g2, g3)
		}
		if stale.Complete(breaker.Failure) {
			e.t.Fatalf("a permit of generation %d counted its failure in generation %d", g0, g3)
		}
		if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 0 {
			e.t.Fatalf("a stale failure changed the closed circuit: %+v", s)
		}
	}},
	{"HalfOpenAdmitsOneProbe", func(e *env) {
		c := e.circuit(e.policy())
		e.open(c)
		e.clock.Advance(10 * time.Second)
		probe := e.acquire(c)
		if !probe.Probe() {
			e.t.Fatal("the first call after the break is not a probe")
		}
		e.state(c, breaker.HalfOpen)
		// A sibling comes back when the lease can free up, and not before the retry delay.
		if oe := e.reject(c); !oe.NotBefore.Equal(t0.Add(15 * time.Second)) {
			e.t.Fatalf("sibling NotBefore %v; want the lease expiry %v", oe.NotBefore, t0.Add(15*time.Second))
		}
		e.clock.Advance(4500 * time.Millisecond)
		if oe := e.reject(c); !oe.NotBefore.Equal(e.clock.Now().Add(time.Second)) {
			e.t.Fatalf("sibling NotBefore %v; want now + HalfOpenRetryDelay", oe.NotBefore)
		}
		if !probe.Complete(breaker.Success) {
			e.t.Fatal("the probe's success did not count")
		}
		e.state(c, breaker.Closed)
		want := []string{"closed>open:failure_threshold", "open>half-open:break_elapsed", "half-open>closed:probe_succeeded"}
		if got := e.reasons(); !slices.Equal(got, want) {
			e.t.Fatalf("transitions %v; want %v", got, want)
		}
	}},
	{"FailedProbeReopensWithGrowingBreak", func(e *env) {
		p := e.policy()
		p.MaxBreakDuration = time.Minute
		c := e.circuit(p)
		e.open(c)
		e.clock.Advance(10 * time.Second)
		e.acquire(c).Complete(breaker.Failure)
		s := e.state(c, breaker.Open)
		if want := e.clock.Now().Add(20 * time.Second); !s.NotBefore.Equal(want) {
			e.t.Fatalf("break after a failed probe ends %v; want %v (doubled)", s.NotBefore, want)
		}
	}},
	{"SeveralProbesAndSuccessesToClose", func(e *env) {
		p := e.policy()
		p.HalfOpenMaxProbes, p.SuccessesToClose = 2, 2
		c := e.circuit(p)
		e.open(c)
		e.clock.Advance(10 * time.Second)
		a, b := e.acquire(c), e.acquire(c)
		e.reject(c)
		if !a.Probe() || !b.Probe() {
			e.t.Fatal("two probe slots should admit two probes")
		}
		a.Complete(breaker.Success)
		e.state(c, breaker.HalfOpen)
		b.Complete(breaker.Success)
		e.state(c, breaker.Closed)
	}},
	{"NeutralProbeFreesItsSlot", func(e *env) {
		c := e.circuit(e.policy())
		e.open(c)
		e.clock.Advance(10 * time.Second)
		if !e.acquire(c).Complete(breaker.Neutral) {
			e.t.Fatal("a Neutral probe within its lease should be live")
		}
		e.state(c, breaker.HalfOpen)
		if !e.acquire(c).Probe() {
			e.t.Fatal("the slot of a Neutral probe was not freed")
		}
	}},
	// Rejected and Unusable say whose fault an error was, for the outbox; to a circuit
	// they are Neutral: no count in any state, and a probe's slot freed.
	{"RejectedAndUnusableAreNeutral", func(e *env) {
		c := e.circuit(e.policy())
		e.call(c, breaker.Failure)
		e.call(c, breaker.Failure)
		e.call(c, breaker.Rejected)
		e.call(c, breaker.Unusable)
		s := e.state(c, breaker.Closed)
		if s.Failures != 2 {
			e.t.Fatalf("failures %d after Rejected and Unusable, want the 2 before", s.Failures)
		}
	}},
	{"RejectedAndUnusableProbesFreeTheirSlots", func(e *env) {
		c := e.circuit(e.policy())
		e.open(c)
		e.clock.Advance(10 * time.Second)
		for _, o := range []breaker.Outcome{breaker.Rejected, breaker.Unusable} {
			if !e.acquire(c).Complete(o) {
				e.t.Fatalf("a %v probe within its lease should be live", o)
			}
			e.state(c, breaker.HalfOpen)
		}
		if !e.acquire(c).Probe() {
			e.t.Fatal("the slot of a Rejected or Unusable probe was not freed")
		}
	}},
	{"ExpiredLeaseFreesTheSlotAndItsOutcomeIsStale", func(e *env) {
		c := e.circuit(e.policy())
		e.open(c)
		e.clock.Advance(10 * time.Second)
		lost := e.acquire(c)
		e.clock.Advance(5 * time.Second) // the lease runs out
		next := e.acquire(c)
		if !next.Probe() {
			e.t.Fatal("the expired lease's slot was not given to the next caller")
		}
		if lost.Complete(breaker.Failure) {
			e.t.Fatal("a probe completed after its lease counted")
		}
		e.state(c, breaker.HalfOpen)
		// An expired lease that nobody took over is as stale: its outcome counts for
		// nothing, and its slot is free.
		e.clock.Advance(5 * time.Second)
		if next.Complete(breaker.Success) {
			e.t.Fatal("a probe completed after its lease counted, though nobody took its slot")
		}
		e.state(c, breaker.HalfOpen)
		last := e.acquire(c)
		if !last.Probe() || !last.Complete(breaker.Success) {
			e.t.Fatal("the slot of an expired lease was not free")
		}
		e.state(c, breaker.Closed)
	}},
	{"MaxInFlight", func(e *env) {
		p := e.policy()
		p.MaxInFlight = 2
		c := e.circuit(p)
		a, b := e.acquire(c), e.acquire(c)
		if _, err := c.Acquire(e.ctx()); err != breaker.ErrSaturated {
			e.t.Fatalf("Acquire over MaxInFlight = %v; want ErrSaturated", err)
		}
		a.Complete(breaker.Success)
		a.Complete(breaker.Success) // gives nothing back twice
		e.acquire(c)
		if _, err := c.Acquire(e.ctx()); err != breaker.ErrSaturated {
			e.t.Fatalf("a second completion gave back a second slot: %v", err)
		}
		b.Complete(breaker.Neutral)
	}},
	{"EndedContextChangesNothing", func(e *env) {
		c := e.circuit(e.policy())
		ctx, cancel := context.WithCancel(e.ctx())
		cancel()
		if _, err := c.Acquire(ctx); !errors.Is(err, context.Canceled) {
			e.t.Fatalf("Acquire with an ended context = %v; want context.Canceled", err)
		}
	}},
	{"ScopeRefused", func(e *env) {
		p := e.policy()
		p.Scope = (e.b.Scope + 1) % 3
		if _, err := e.make(Config{Policy: p, Clock: e.clock}); !errors.As(err, new(*breaker.PolicyError)) ||
			!strings.Contains(err.Error(), "Scope") {
			e.t.Fatalf("a circuit of scope %v from a %v backend: %v; want a policy error naming Scope", p.Scope, e.b.Scope, err)
		}
	}},
	{"ForceOpenHoldsThenProbes", func(e *env) {
		c := e.circuit(e.policy())
		held := e.acquire(c)
		until := t0.Add(time.Minute)
		e.must(c.ForceOpen(e.ctx(), until))
		s := e.state(c, breaker.Open)
		if s.Override != breaker.ForcedOpen || !s.OverrideUntil.Equal(until) {
			e.t.Fatalf("snapshot %+v; want forced open until %v", s, until)
		}
		if oe := e.reject(c); !oe.NotBefore.Equal(until) {
			e.t.Fatalf("NotBefore %v; want %v", oe.NotBefore, until)
		}
		if held.Complete(breaker.Failure) {
			e.t.Fatal("an outcome counted under ForceOpen")
		}
		e.clock.Advance(time.Minute)
		if !e.acquire(c).Probe() {
			e.t.Fatal("the call after ForceOpen ended is not a probe")
		}
		want := []string{"closed>open:forced_open", "open>half-open:override_expired"}
		if got := e.reasons(); !slices.Equal(got, want) {
			e.t.Fatalf("transitions %v; want %v", got, want)
		}
	}},
	{"ForceCloseHoldsThenClosesWithoutEvidence", func(e *env) {
		c := e.circuit(e.policy())
		e.open(c)
		e.must(c.ForceClose(e.ctx(), e.clock.Now().Add(time.Minute)))
		for range 5 {
			if e.acquire(c).Complete(breaker.Failure) {
				e.t.Fatal("an outcome counted under ForceClose")
			}
		}
		s := e.state(c, breaker.Closed)
		if s.Override != breaker.ForcedClosed {
			e.t.Fatalf("override %v", s.Override)
		}
		e.clock.Advance(time.Minute)
		e.call(c, breaker.Failure)
		if s2 := c.Snapshot(); s2.Override != breaker.NoOverride || s2.Failures != 1 || s2.Generation != s.Generation+1 {
			e.t.Fatalf("after ForceClose ended: %+v (generation before %d)", s2, s.Generation)
		}
	}},
	{"ClearOverride", func(e *env) {
		c := e.circuit(e.policy())
		e.must(c.ClearOverride(e.ctx())) // nothing to clear
		e.must(c.ForceOpen(e.ctx(), t0.Add(time.Hour)))
		e.must(c.ClearOverride(e.ctx()))
		if !e.acquire(c).Probe() {
			e.t.Fatal("a cleared ForceOpen does not probe next")
		}
		e.must(c.ForceClose(e.ctx(), t0.Add(time.Hour)))
		e.must(c.ClearOverride(e.ctx()))
		for range 3 {
			e.call(c, breaker.Failure)
		}
		e.state(c, breaker.Open)
		want := []string{"closed>open:forced_open", "open>half-open:override_cleared",
			"half-open>closed:forced_closed", "closed>closed:override_cleared", "closed>open:failure_threshold"}
		if got := e.reasons(); !slices.Equal(got, want) {
			e.t.Fatalf("transitions %v; want %v", got, want)
		}
	}},
	{"ObserverMayCallBack", func(e *env) {
		var c Circuit
		var mu sync.Mutex
		var gens []uint64
		p := e.policy()
		p.FailureThreshold = 1
		made, err := e.make(Config{Policy: p, Clock: e.clock, Observer: func(tr breaker.Transition) {
			mu.Lock()
			gens = append(gens, tr.Generation)
			mu.Unlock()
			_ = c.Snapshot() // must not deadlock
			if tr.Reason == breaker.ReasonFailureThreshold {
				_ = c.ForceOpen(context.Background(), tr.At.Add(time.Hour))
			}
		}})
		e.must(err)
		c = made
		e.call(c, breaker.Failure)
		mu.Lock()
		defer mu.Unlock()
		if len(gens) != 2 || gens[1] <= gens[0] {
			e.t.Fatalf("generations observed %v; want two, in order", gens)
		}
		if s := c.Snapshot(); s.Override != breaker.ForcedOpen {
			e.t.Fatalf("the observer's ForceOpen did not hold: %+v", s)
		}
	}},
}

// sharedContract holds for backends whose circuits share one state.
var sharedContract = []check{
	{"ReplicasShareOneCircuit", func(e *env) {
		rs := []Circuit{e.circuit(e.policy()), e.circuit(e.policy()), e.circuit(e.policy()), e.circuit(e.policy())}
		for _, r := range rs {
			e.call(r, breaker.Success) // each reads the state once
		}
		for i := range 3 {
			e.call(rs[i], breaker.Failure) // one failure each reaches the shared threshold
		}
		deadline := e.reject(rs[2]).NotBefore
		e.clock.Advance(e.b.MaxStaleness)
		for _, r := range rs {
			if oe := e.reject(r); !oe.NotBefore.Equal(deadline) {
				e.t.Fatalf("replica NotBefore %v; want the shared deadline %v", oe.NotBefore, deadline)
			}
		}
		e.clock.Set(deadline)
		probes := 0
		for _, r := range rs {
			if p, err := r.Acquire(e.ctx()); err == nil {
				if !p.Probe() {
					e.t.Fatal("a replica admitted a call that is not a probe while half-open")
				}
				probes++
				defer p.Complete(breaker.Success)
			}
		}
		if probes != 1 {
			e.t.Fatalf("%d probes across the replicas; want exactly 1", probes)
		}
	}},
	{"ForceOpenHoldsOnEveryReplica", func(e *env) {
		rs := []Circuit{e.circuit(e.policy()), e.circuit(e.policy()), e.circuit(e.policy())}
		for _, r := range rs {
			e.call(r, breaker.Success)
		}
		e.must(rs[0].ForceOpen(e.ctx(), t0.Add(time.Hour)))
		e.clock.Advance(e.b.MaxStaleness)
		for _, r := range rs {
			e.reject(r)
		}
		e.must(rs[1].ClearOverride(e.ctx()))
		e.clock.Advance(e.b.MaxStaleness)
		if !e.acquire(rs[2]).Probe() {
			e.t.Fatal("after ClearOverride on one replica another does not probe")
		}
	}},
	{"ObserversLearnOtherReplicasTransitions", func(e *env) {
		watcher := e.circuit(e.policy()) // records transitions
		other := e.circuit(e.policy())
		e.call(watcher, breaker.Success)
		e.open(other)
		e.clock.Advance(e.b.MaxStaleness)
		e.reject(watcher)
		if got := e.reasons(); !slices.Equal(got, []string{"closed>open:failure_threshold"}) {
			e.t.Fatalf("transitions seen by another replica %v; want the opening with its reason", got)
		}
	}},
	{"OtherPolicyRefused", func(e *env) {
		e.call(e.circuit(e.policy()), breaker.Success)
		p := e.policy()
		p.BreakDuration = 7 * time.Second
		c, err := e.make(Config{Policy: p, Clock: e.clock})
		if err == nil {
			_, err = c.Acquire(e.ctx())
		}
		if !errors.Is(err, breaker.ErrUnavailable) || !strings.Contains(err.Error(), "BreakDuration") {
			e.t.Fatalf("a replica with another BreakDuration: %v; want a refusal (ErrUnavailable) naming BreakDuration", err)
		}
	}},
	{"FailsClosed", func(e *env) {
		c := e.circuit(e.policy())
		e.call(c, breaker.Success)
		e.b.Break(true)
		defer e.b.Break(false)
		e.clock.Advance(e.b.MaxStaleness)
		for range 3 {
			if p, err := c.Acquire(e.ctx()); !errors.Is(err, breaker.ErrUnavailable) {
				if err == nil {
					p.Complete(breaker.Neutral)
				}
				e.t.Fatalf("Acquire with the state unreachable and the snapshot stale = %v; want ErrUnavailable", err)
			}
		}
	}},
}
