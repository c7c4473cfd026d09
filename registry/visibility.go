package registry

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Reasons of the transitions of partitions (Partitions) the registry's observers
// are told, beside the circuits' own (breaker.Transition.Reason). Such a transition
// has the partition's identity ("kafka:orders/3"), From Closed To Open when the
// partition is isolated and From Open To Closed when the isolation ends; the
// destination's circuit itself did not move.
const (
	ReasonPartitionIsolated    = "partition_isolated"     // consecutive failures of the partition's calls
	ReasonPartitionHealed      = "partition_healed"       // a call to the partition succeeded
	ReasonPartitionLeaderMoved = "partition_leader_moved" // another broker leads it: its evidence was about the old one
)

// PartitionOfTransition reports the partition a transition told to the registry's
// observers is about, and false for a transition of a destination's circuit.
func PartitionOfTransition(t breaker.Transition) (int, bool) {
	if !strings.HasPrefix(t.Reason, "partition_") {
		return 0, false
	}
	i := strings.LastIndexByte(t.Identity, '/')
	if i < 0 {
		return 0, false
	}
	p, err := strconv.Atoi(t.Identity[i+1:])
	return p, err == nil
}

// observePartition tells the registry's observers a transition of a partition of d.
func (r *Registry) observePartition(d transport.Destination, t breaker.Transition) {
	for _, f := range r.observers {
		f(d, t)
	}
}

// transition tells the observers that partition p went from one state to another
// at at, for reason. It runs without ps.mu held.
func (ps *Partitions) transition(p int, from, to breaker.State, at time.Time, reason string) {
	if ps.observe == nil {
		return
	}
	ps.observe(ps.dest, breaker.Transition{
		Identity: ps.dest.String() + "/" + strconv.Itoa(p), From: from, To: to, At: at, Reason: reason,
	})
}

// Adopt makes circuit c, made outside the registry, a live circuit under d: Report,
// Snapshots, Snapshot and Lookup see it (so the admin API, the CLI and telemetry show
// it), calls to d go through it, and it is never evicted. Adapters adopt the circuits
// of their own mechanisms that refuse calls (the amqp package's connection circuit),
// so that a refusal's error names a circuit on-call can look up. When c accepts
// observers after creation (an Observe(key any, f func(breaker.Transition)) method,
// as the shared circuits have), the registry's observers are told its transitions.
//
// Adopting the circuit live under d again does nothing (c must then be comparable: a
// pointer, or a struct of pointers). It fails for an invalid destination, a nil
// circuit, or d live with another circuit, whether the registry's own or adopted.
func (r *Registry) Adopt(d transport.Destination, c breaker.Circuit) error {
	if c == nil {
		return fmt.Errorf("registry: Adopt %s: nil circuit", d)
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("registry: Adopt: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.fresh[d]
	if !ok {
		e, ok = (*r.circuits.Load())[d]
	}
	switch {
	case ok && e.adopted && e.circuit == c:
		return nil
	case ok:
		return fmt.Errorf("registry: Adopt %s: another circuit is live under that name", d)
	}
	e = &entry{dest: d, circuit: c, adopted: true, minBudget: r.Policy(d).minCallBudget()}
	if r.countCalls {
		e.calls = new(callCounts)
	}
	if o, ok := c.(observable); ok {
		if f := r.observe(d, false); f != nil {
			o.Observe(observerKey{r, d}, f)
		}
	}
	e.used.Store(true)
	r.fresh[d] = e
	return nil
}

// RetryAfter reports whether err is a refusal made before the broker was asked — an
// open circuit or an isolated partition (*breaker.OpenError, a connection circuit's
// included), the adaptive limit (*admission.LimitError), the throttle
// (*admission.ThrottleError), or any other *RejectedError — and how long the caller
// should wait before trying again: until the refusal's NotBefore by the wall clock,
// rounded up to whole seconds and at least one, the value of an HTTP Retry-After
// header. It is (0, false) for nil and for errors of calls that reached the broker.
func RetryAfter(err error) (time.Duration, bool) {
	var at time.Time
	if oe, ok := errors.AsType[*breaker.OpenError](err); ok {
		at = oe.NotBefore
	} else if le, ok := errors.AsType[*admission.LimitError](err); ok {
		at = le.NotBefore
	} else if te, ok := errors.AsType[*admission.ThrottleError](err); ok {
		at = te.NotBefore
	} else if _, ok := errors.AsType[*RejectedError](err); !ok {
		return 0, false
	}
	wait := (time.Until(at) + time.Second - 1) / time.Second * time.Second
	return max(wait, time.Second), true
}
