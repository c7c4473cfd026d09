package registry_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// circuitPolicy is a registry policy whose circuit opens after threshold failures in
// a row, for brk.
func circuitPolicy(threshold int, brk time.Duration) registry.Policy {
	return registry.Policy{Circuit: breaker.Policy{FailureThreshold: threshold, BreakDuration: brk}}
}

type policyEnv struct {
	t      *testing.T
	clock  *fakeclock.Clock
	r      *registry.Registry
	events []registry.PolicyEvent
	seen   []breaker.Transition
}

func newPolicyEnv(t *testing.T, def registry.Policy, opts ...registry.Option) *policyEnv {
	t.Helper()
	e := &policyEnv{t: t, clock: fakeclock.New(t0)}
	opts = append([]registry.Option{
		registry.WithClock(e.clock),
		registry.WithPolicyHook(func(ev registry.PolicyEvent) { e.events = append(e.events, ev) }),
		registry.WithObserver(func(_ transport.Destination, tr breaker.Transition) { e.seen = append(e.seen, tr) }),
	}, opts...)
	r, err := registry.New(def, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	return e
}

func (e *policyEnv) apply(set registry.PolicySet) (registry.PolicyVersion, registry.PolicyPlan) {
	e.t.Helper()
	v, plan, err := e.r.ApplyPolicies(registry.PolicyChange{Set: set, Author: "ann", Reason: "tune"})
	if err != nil {
		e.t.Fatalf("ApplyPolicies: %v", err)
	}
	return v, plan
}

func (e *policyEnv) circuit(d transport.Destination) breaker.Circuit {
	e.t.Helper()
	c, err := e.r.Circuit(d)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func TestApplyPoliciesVersionsAndKeepsState(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(1, 30*time.Second))
	fail(t, e.circuit(orders))
	e.clock.Advance(10 * time.Second)
	if v := e.r.Policies(); v.Version != 1 || v.Author != "registry.New" {
		t.Fatalf("initial version %+v", v)
	}
	v, plan := e.apply(registry.PolicySet{Default: circuitPolicy(3, time.Minute)})
	if v.Version != 2 || v.Author != "ann" || v.Reason != "tune" || !v.At.Equal(e.clock.Now()) || v.Fingerprint == "" {
		t.Fatalf("version %+v", v)
	}
	if plan.From != 1 || plan.To != 2 || len(plan.Default) == 0 || len(plan.Destinations) != 1 || !plan.Destinations[0].Live {
		t.Fatalf("plan %+v", plan)
	}
	s := e.circuit(orders).Snapshot()
	if s.State != breaker.Open || !s.NotBefore.Equal(e.clock.Now().Add(20*time.Second)) {
		t.Fatalf("after the change: %v until %v, want open with 20s left", s.State, s.NotBefore)
	}
	if got := e.r.Policy(orders).Circuit.FailureThreshold; got != 3 {
		t.Fatalf("Policy(orders) threshold %d, want 3", got)
	}
	if got := e.circuit(refunds).(*breaker.Breaker).Policy().FailureThreshold; got != 3 {
		t.Fatalf("a circuit created after the change has threshold %d, want 3", got)
	}
	if len(e.events) != 1 || e.events[0].Action != "apply" || e.events[0].Version.Version != 2 {
		t.Fatalf("hook events %+v", e.events)
	}
	last := e.seen[len(e.seen)-1]
	if last.Reason != breaker.ReasonPolicyChanged || last.To != breaker.Open {
		t.Fatalf("observer's last transition %+v", last)
	}
}

func TestApplyPoliciesRefusesWhatNewRefuses(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(2, time.Minute))
	e.circuit(orders)
	for _, tc := range []struct {
		name string
		set  registry.PolicySet
		want []string // in the error
	}{
		{"zero default", registry.PolicySet{}, []string{"default policy", "FailureThreshold"}},
		{"override without a break", registry.PolicySet{Default: circuitPolicy(2, time.Minute),
			Overrides: map[string]registry.Policy{"kafka:refunds": circuitPolicy(2, 0)}}, []string{`"kafka:refunds"`, "BreakDuration"}},
		{"bad destination", registry.PolicySet{Default: circuitPolicy(2, time.Minute),
			Overrides: map[string]registry.Policy{"orders": circuitPolicy(2, time.Minute)}}, []string{`"orders"`}},
		{"scope without a factory", registry.PolicySet{Default: circuitPolicy(2, time.Minute),
			Overrides: map[string]registry.Policy{"kafka:refunds": {Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute, Scope: breaker.SharedDependency}}}},
			[]string{"kafka:refunds", "Circuit.Scope"}},
		{"bad admission", registry.PolicySet{Default: registry.Policy{Circuit: policy.Circuit, Admission: admission.Policy{Limit: admission.LimitPolicy{Max: -1}}}},
			[]string{"default policy", "Admission"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := e.r.ApplyPolicies(registry.PolicyChange{Set: tc.set, Author: "ann", Reason: "r"})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
			if _, err := e.r.PlanPolicies(tc.set); err == nil {
				t.Fatal("the dry run accepted what apply refuses")
			}
			if v := e.r.Policies().Version; v != 1 {
				t.Fatalf("version %d after a refused change", v)
			}
		})
	}
	if _, _, err := e.r.ApplyPolicies(registry.PolicyChange{Set: registry.PolicySet{Default: policy}}); err == nil {
		t.Fatal("a change without author and reason was accepted")
	}
}

func TestPlanPoliciesSaysWhatWouldHappenAndChangesNothing(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(5, time.Minute))
	for range 4 {
		fail(t, e.circuit(orders))
	}
	fail(t, e.circuit(refunds))
	set := registry.PolicySet{Default: circuitPolicy(3, time.Minute), Overrides: map[string]registry.Policy{
		"kafka:refunds": {Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute, FailureWindow: 10 * time.Second}},
		"kafka:audit":   {Circuit: breaker.DisabledPolicy()},
	}}
	plan, err := e.r.PlanPolicies(set)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Destinations) != 3 {
		t.Fatalf("plan rows %+v, want audit, orders, refunds", plan.Destinations)
	}
	audit, ord, ref := plan.Destinations[0], plan.Destinations[1], plan.Destinations[2]
	if audit.Destination != "kafka:audit" || audit.Live {
		t.Fatalf("audit row %+v", audit)
	}
	if ord.Destination != "kafka:orders" || !ord.Live || !ord.OpensOnNextFailure || ord.RestartsCounts ||
		ord.Fields[0] != (breaker.FieldChange{Field: "Circuit.FailureThreshold", From: "5", To: "3"}) {
		t.Fatalf("orders row %+v", ord)
	}
	if ref.Destination != "kafka:refunds" || !ref.RestartsCounts || ref.OpensOnNextFailure {
		t.Fatalf("refunds row %+v", ref)
	}
	if v := e.r.Policies().Version; v != 1 || e.circuit(orders).Snapshot().Failures != 4 || len(e.events) != 0 {
		t.Fatal("the dry run changed something")
	}
	e.apply(set)
	if got := e.circuit(refunds).Snapshot().Failures; got != 0 {
		t.Fatalf("refunds failures %d after its window started: want the counts restarted", got)
	}
	fail(t, e.circuit(orders))
	if s := e.circuit(orders).Snapshot(); s.State != breaker.Open {
		t.Fatalf("orders %v after the next failure; the plan said it opens", s.State)
	}
}

func TestRollbackPolicies(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(2, time.Minute), registry.WithPolicyHistory(3))
	for n := 3; n <= 6; n++ {
		e.apply(registry.PolicySet{Default: circuitPolicy(n, time.Minute)})
	}
	h := e.r.PolicyHistory()
	if len(h) != 3 || h[0].Version != 5 || h[2].Version != 3 {
		t.Fatalf("history %v, want versions 5, 4, 3", versions(h))
	}
	if _, _, err := e.r.RollbackPolicies(1, "bob", "undo"); !errors.Is(err, registry.ErrPolicyVersion) {
		t.Fatalf("rollback to a version no longer kept: %v", err)
	}
	v, _, err := e.r.RollbackPolicies(3, "bob", "undo")
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != 6 || v.Author != "bob" || e.r.Policy(orders).Circuit.FailureThreshold != 4 {
		t.Fatalf("rollback made %+v, threshold %d; want version 6 with version 3's set (4)", v, e.r.Policy(orders).Circuit.FailureThreshold)
	}
	if ev := e.events[len(e.events)-1]; ev.Action != "rollback" {
		t.Fatalf("last event %+v", ev)
	}
}

func TestPolicyExpiryReverts(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(2, time.Minute))
	e.circuit(orders)
	_, _, err := e.r.ApplyPolicies(registry.PolicyChange{Set: registry.PolicySet{Default: circuitPolicy(9, time.Minute)},
		Author: "ann", Reason: "incident", Expires: e.clock.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if v := e.r.Policies(); v.Version != 2 || v.Reverts != 1 {
		t.Fatalf("temporary version %+v", v)
	}
	e.clock.Advance(time.Hour - time.Nanosecond)
	if e.r.ExpirePolicies() || e.r.Policies().Version != 2 {
		t.Fatal("reverted before the expiry")
	}
	e.clock.Advance(time.Nanosecond)
	if !e.r.ExpirePolicies() {
		t.Fatal("not reverted at the expiry")
	}
	v := e.r.Policies()
	if v.Version != 3 || v.Author != "expiry" || !v.Expires.IsZero() || e.r.Policy(orders).Circuit.FailureThreshold != 2 {
		t.Fatalf("after the expiry %+v", v)
	}
	if got := e.circuit(orders).(*breaker.Breaker).Policy().FailureThreshold; got != 2 {
		t.Fatalf("the live circuit kept threshold %d", got)
	}
	if ev := e.events[len(e.events)-1]; ev.Action != "expire" {
		t.Fatalf("last event %+v", ev)
	}
	if _, _, err := e.r.ApplyPolicies(registry.PolicyChange{Set: registry.PolicySet{Default: policy}, Author: "a", Reason: "r", Expires: e.clock.Now()}); err == nil {
		t.Fatal("an expiry in the past was accepted")
	}
}

func TestApplyPoliciesAdmissionRestartsAndTellsObservers(t *testing.T) {
	e := newPolicyEnv(t, circuitPolicy(2, time.Minute))
	e.circuit(orders)
	lim := registry.Policy{Circuit: circuitPolicy(2, time.Minute).Circuit, Admission: admission.DefaultPolicy()}
	_, plan := e.apply(registry.PolicySet{Default: lim})
	if len(plan.Destinations) != 1 || !plan.Destinations[0].RestartsAdmission {
		t.Fatalf("plan %+v", plan.Destinations)
	}
	if lim, err := e.r.Admission(orders); err != nil || lim == nil {
		t.Fatalf("no admission control after enabling it: %v", err)
	}
	last := e.seen[len(e.seen)-1]
	if last.Reason != breaker.ReasonPolicyChanged || last.From != last.To {
		t.Fatalf("observer's last transition %+v", last)
	}
}

// A live shared circuit cannot change its circuit policy: the set is refused, naming
// the destination.
func TestApplyPoliciesRefusesLiveSharedCircuitChange(t *testing.T) {
	shared := registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute, Scope: breaker.SharedDependency}}
	e := newPolicyEnv(t, shared, registry.WithCircuitFactory(breaker.SharedDependency, func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		b, err := breaker.New(d.String(), breaker.Policy{FailureThreshold: p.FailureThreshold, BreakDuration: p.BreakDuration})
		return struct{ breaker.Circuit }{b}, err
	}))
	e.circuit(orders)
	shared.Circuit.FailureThreshold = 3
	_, _, err := e.r.ApplyPolicies(registry.PolicyChange{Set: registry.PolicySet{Default: shared}, Author: "a", Reason: "r"})
	if err == nil || !strings.Contains(err.Error(), "kafka:orders") || !strings.Contains(err.Error(), "Circuit.FailureThreshold") {
		t.Fatalf("err %v, want a refusal naming kafka:orders and Circuit.FailureThreshold", err)
	}
}

func versions(h []registry.PolicyVersion) []uint64 {
	var out []uint64
	for _, v := range h {
		out = append(out, v.Version)
	}
	return out
}

// Policy sets change while calls go through, to live destinations and new ones:
// under -race this proves that the call path reads the set in force without locking.
func TestApplyPoliciesConcurrentWithCalls(t *testing.T) {
	r, err := registry.New(registry.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	sets := []registry.PolicySet{
		{Default: registry.DefaultPolicy()},
		{Default: circuitPolicy(2, time.Millisecond)},
		{Default: registry.DefaultPolicy(), Overrides: map[string]registry.Policy{"kafka:d1": circuitPolicy(1, time.Millisecond)}},
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				d := transport.Destination{Broker: "kafka", Name: "d" + strconv.Itoa((i+w)%5)}
				_ = r.Call(context.Background(), d, 1, nil, func(context.Context) error {
					if i%4 == 0 {
						return errors.New("down")
					}
					return nil
				})
			}
		})
	}
	changes := 300
	if testing.Short() {
		changes = 30 // still every set ten times over, each applied while calls run
	}
	for i := range changes {
		if _, _, err := r.ApplyPolicies(registry.PolicyChange{Set: sets[i%len(sets)], Author: "a", Reason: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	wg.Wait()
	if v := r.Policies().Version; v != uint64(changes)+1 {
		t.Fatalf("version %d after %d changes, want %d", v, changes, changes+1)
	}
	// Every circuit, made before, during or after a change, runs the set in force.
	for d := range r.Snapshots() {
		c, _ := r.Lookup(d)
		if got, want := c.(*breaker.Breaker).Policy(), backend.Normalize(r.Policy(d).Circuit); got != want {
			t.Fatalf("%v runs %+v, the set in force says %+v", d, got, want)
		}
	}
}
