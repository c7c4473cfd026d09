package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// observed collects what the registry's observers are told.
type observed struct {
	mu sync.Mutex
	ts []string // "identity from->to reason"
}

func (o *observed) record(d transport.Destination, t breaker.Transition) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ts = append(o.ts, t.Identity+" "+t.From.String()+"->"+t.To.String()+" "+t.Reason)
}

func (o *observed) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ts := o.ts
	o.ts = nil
	return ts
}

// sendKey makes one partitioned call of a message bound for partition p that fails
// with sendErr (nil: published).
func sendKey(r *registry.Registry, p int, sendErr error) error {
	return r.CallPartitioned(context.Background(), orders, registry.PartitionedCall{
		N: 1, Classify: func(error) breaker.Outcome { return breaker.Failure },
		Route: func(ps *registry.Partitions, parts []int) []error {
			parts[0] = p
			if err := ps.Admit(p); err != nil {
				return []error{err}
			}
			return nil
		},
		Send: func(context.Context, []int, []int) error { return sendErr },
	})
}

// A topic written with one key whose partition fails is down: the partition is
// isolated and, no other used partition answering, its failures open the topic's
// circuit. Observers see both transitions, and the partition's healing; the
// isolated partition keeps its last error.
func TestOneKeyTopicFailingIsDown(t *testing.T) {
	clock := fakeclock.New(t0)
	var obs observed
	r := newRegistry(t, registry.WithClock(clock), registry.WithObserver(obs.record))
	ps, err := r.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(3) // partitions 0 and 2 exist but are never written
	down := errors.New("dial tcp 127.0.0.1:9092: connect: connection refused")
	for range 2 {
		if err := sendKey(r, 1, down); !errors.Is(err, down) {
			t.Fatalf("a failing call returned %v", err)
		}
	}
	s, _ := r.Snapshot(orders)
	if s.State != breaker.Open || s.LastError != down.Error() {
		t.Fatalf("topic %v with last error %q; want open with the partition's error", s.State, s.LastError)
	}
	want := []string{"kafka:orders/1 closed->open partition_isolated", "kafka:orders closed->open failure_threshold"}
	if got := obs.take(); !slices.Equal(got, want) {
		t.Fatalf("observed %q, want %q", got, want)
	}
	if iso := r.IsolatedPartitions(orders); len(iso) != 1 || iso[0].Partition != 1 || iso[0].LastError != down.Error() {
		t.Fatalf("isolated %+v; want partition 1 with its last error", iso)
	}
	err = sendKey(r, 1, nil)
	if oe, ok := errors.AsType[*breaker.OpenError](err); !ok || oe.Identity != "kafka:orders" {
		t.Fatalf("a call while down: %v; want the topic's circuit refusing", err)
	}

	clock.Advance(time.Minute)
	if err := sendKey(r, 1, nil); err != nil {
		t.Fatalf("the probe after the break: %v", err)
	}
	if got := obs.take(); !slices.Contains(got, "kafka:orders/1 open->closed partition_healed") {
		t.Fatalf("observed %q; want the partition's healing", got)
	}
	if r.IsolatedPartitions(orders) != nil {
		t.Fatal("partition 1 still isolated after a published call")
	}
}

// While another used partition answers, an isolated partition refuses its calls and
// the topic's circuit stays closed; a partition the service has not written does not
// count as answering.
func TestIsolationNeedsAnotherUsedPartition(t *testing.T) {
	clock := fakeclock.New(t0)
	ps := partitionsOf(t, clock, policy.Circuit, registry.PartitionPolicy{Failures: 2, Isolation: time.Minute})
	ps.SetCount(4)
	ps.Complete(3, breaker.Success)
	failN(ps, 1, 2)
	if ps.Admit(1) == nil {
		t.Fatal("partition 1 admitted while partition 3 answers")
	}
	if o := ps.TopicOutcome(breaker.Failure, false, 1); o != breaker.Neutral {
		t.Fatalf("topic told %v while partition 3 answers, want Neutral", o)
	}
	failN(ps, 3, 2)
	if err := ps.Admit(1); err != nil {
		t.Fatalf("every used partition isolated, partition 1 still refused: %v", err)
	}
	if o := ps.TopicOutcome(breaker.Failure, false, 1); o != breaker.Failure {
		t.Fatalf("topic told %v with no used partition answering, want Failure", o)
	}
	// An unkeyed message leaves the isolated partitions for one never written.
	if p, err := ps.Route(1, 4, false); p != 2 || err != nil {
		t.Fatalf("unkeyed Route(1) = %d, %v; want 2", p, err)
	}
	if p, err := ps.Route(3, 4, true); p != 3 || err != nil {
		t.Fatalf("keyed Route(3) = %d, %v; want 3 let through to the topic's circuit", p, err)
	}
}

// A leader change ends an isolation with its own reason; a failed probe's new
// isolation is no transition.
func TestPartitionTransitionsReasons(t *testing.T) {
	clock := fakeclock.New(t0)
	var obs observed
	r := newRegistry(t, registry.WithClock(clock), registry.WithObserver(obs.record),
		registry.WithPartitionPolicy(registry.PartitionPolicy{Failures: 1, Isolation: time.Second}))
	ps, err := r.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	use(ps, 2)
	ps.Leader(0, 1)
	ps.Complete(0, breaker.Failure)
	clock.Advance(time.Second)
	if err := ps.Admit(0); err != nil {
		t.Fatalf("no probe: %v", err)
	}
	ps.Complete(0, breaker.Failure)
	ps.Leader(0, 2)
	want := []string{"kafka:orders/0 closed->open partition_isolated", "kafka:orders/0 open->closed partition_leader_moved"}
	if got := obs.take(); !slices.Equal(got, want) {
		t.Fatalf("observed %q, want %q", got, want)
	}
}

func TestPartitionOfTransition(t *testing.T) {
	for _, c := range []struct {
		t    breaker.Transition
		p    int
		isIt bool
	}{
		{breaker.Transition{Identity: "kafka:orders/3", Reason: registry.ReasonPartitionIsolated}, 3, true},
		{breaker.Transition{Identity: "kafka:a/b/12", Reason: registry.ReasonPartitionHealed}, 12, true},
		{breaker.Transition{Identity: "kafka:orders", Reason: breaker.ReasonFailureThreshold}, 0, false},
		{breaker.Transition{Identity: "kafka:orders/x", Reason: registry.ReasonPartitionHealed}, 0, false},
		{breaker.Transition{Identity: "kafka:orders", Reason: registry.ReasonPartitionHealed}, 0, false},
	} {
		if p, ok := registry.PartitionOfTransition(c.t); p != c.p || ok != c.isIt {
			t.Errorf("PartitionOfTransition(%+v) = %d, %v; want %d, %v", c.t, p, ok, c.p, c.isIt)
		}
	}
}

// relayCircuit is a local circuit that accepts observers after creation, as the
// circuits adapters adopt do.
type relayCircuit struct {
	*breaker.Breaker
	mu  sync.Mutex
	obs map[any]func(breaker.Transition)
}

func newRelayCircuit(t *testing.T, id string, clock breaker.Clock) *relayCircuit {
	t.Helper()
	c := &relayCircuit{obs: map[any]func(breaker.Transition){}}
	b, err := breaker.New(id, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}, breaker.WithClock(clock),
		breaker.WithObserver(func(tr breaker.Transition) {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, f := range c.obs {
				f(tr)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	c.Breaker = b
	return c
}

func (c *relayCircuit) Observe(key any, f func(breaker.Transition)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.obs[key] = f
}

// An adopted circuit is live under its name for every reader, its transitions reach
// the registry's observers, and idle eviction keeps it.
func TestAdoptShowsACircuitMadeElsewhere(t *testing.T) {
	clock := fakeclock.New(t0)
	var obs observed
	r := newRegistry(t, registry.WithClock(clock), registry.WithObserver(obs.record), registry.WithIdleEviction(time.Second))
	conn := transport.Destination{Broker: "amqp-connection", Name: "127.0.0.1:5672"}
	c := newRelayCircuit(t, conn.String(), clock)
	if err := r.Adopt(conn, c); err != nil {
		t.Fatal(err)
	}
	if err := r.Adopt(conn, c); err != nil {
		t.Fatalf("adopting the same circuit again: %v", err)
	}
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.CompleteWith(breaker.Failure, errors.New("dial tcp 127.0.0.1:5672: connection refused"))
	if got := obs.take(); !slices.Equal(got, []string{"amqp-connection:127.0.0.1:5672 closed->open failure_threshold"}) {
		t.Fatalf("observed %q", got)
	}
	if s, ok := r.Snapshot(conn); !ok || s.State != breaker.Open || s.LastError == "" {
		t.Fatalf("Snapshot = %+v, %v", s, ok)
	}
	if got, ok := r.Lookup(conn); !ok || got != breaker.Circuit(c) {
		t.Fatalf("Lookup = %v, %v", got, ok)
	}
	found := false
	for _, rep := range r.Report() {
		found = found || rep.Destination == conn && rep.Snapshot.State == breaker.Open
	}
	if !found {
		t.Fatalf("Report does not list %s", conn)
	}
	clock.Advance(time.Second) // the break ends: the probe closes it
	if p, err = c.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Complete(breaker.Success)
	for range 3 {
		clock.Advance(time.Second)
		r.EvictIdle()
	}
	if _, ok := r.Lookup(conn); !ok {
		t.Fatal("the adopted circuit was evicted")
	}
}

// Adopt refuses what it cannot show: no circuit, a bad name, or a name another
// circuit is live under.
func TestAdoptRefuses(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t)
	conn := transport.Destination{Broker: "amqp-connection", Name: "127.0.0.1:5672"}
	if _, err := r.Circuit(orders); err != nil {
		t.Fatal(err)
	}
	if err := r.Adopt(conn, newRelayCircuit(t, conn.String(), clock)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		d    transport.Destination
		c    breaker.Circuit
	}{
		{"nil circuit", conn, nil},
		{"bad destination", transport.Destination{Broker: "AMQP", Name: "x"}, newRelayCircuit(t, "x", clock)},
		{"the registry's own circuit", orders, newRelayCircuit(t, orders.String(), clock)},
		{"another adopted circuit", conn, newRelayCircuit(t, conn.String(), clock)},
	} {
		if err := r.Adopt(c.d, c.c); err == nil {
			t.Errorf("%s: adopted", c.name)
		}
	}
}

// RetryAfter answers every refusal made before the broker was asked, in whole
// seconds of at least one, and nothing else.
func TestRetryAfter(t *testing.T) {
	later := time.Now().Add(time.Hour + 500*time.Millisecond)
	open := backend.NewOpenError("kafka:orders", breaker.LocalProcess, later)
	for _, c := range []struct {
		name    string
		err     error
		refused bool
		long    bool // until later, not the one-second floor
	}{
		{"open circuit", &registry.RejectedError{Destination: orders, Err: open}, true, true},
		{"isolated partition", &registry.PartitionRejectedError{Destination: orders, Partition: 1, Err: open}, true, true},
		{"connection circuit, wrapped", fmt.Errorf("amqp: dial: %w", open), true, true},
		{"adaptive limit", &registry.RejectedError{Destination: orders, Err: &admission.LimitError{NotBefore: later}}, true, true},
		{"throttle", &registry.RejectedError{Destination: orders, Err: &admission.ThrottleError{NotBefore: later}}, true, true},
		{"in-flight bound", &registry.RejectedError{Destination: orders, Err: breaker.ErrSaturated}, true, false},
		{"open circuit, deadline past", backend.NewOpenError("kafka:orders", breaker.LocalProcess, time.Now().Add(-time.Second)), true, false},
		{"broker error", errors.New("kafka: leader not available"), false, false},
		{"nil", nil, false, false},
	} {
		wait, refused := registry.RetryAfter(c.err)
		switch {
		case refused != c.refused:
			t.Errorf("%s: refused %v, want %v", c.name, refused, c.refused)
		case !refused && wait != 0:
			t.Errorf("%s: wait %v for no refusal", c.name, wait)
		case refused && wait%time.Second != 0:
			t.Errorf("%s: wait %v is not whole seconds", c.name, wait)
		case refused && c.long && (wait < time.Hour || wait > time.Hour+time.Second):
			t.Errorf("%s: wait %v, want about an hour", c.name, wait)
		case refused && !c.long && wait != time.Second:
			t.Errorf("%s: wait %v, want the one-second floor", c.name, wait)
		}
	}
}
