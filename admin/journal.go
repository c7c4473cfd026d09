package admin

import (
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Journal keeps the most recent transitions of a registry's circuits for the
// dashboard's timeline. Pass its Record method to registry.WithObserver; it is safe for
// concurrent use and never blocks the circuit for long (one short critical section).
type Journal struct {
	mu   sync.Mutex // guards ring, next, full
	ring []Event
	next int
	full bool
}

// Event is one transition of one destination's circuit, or, for a circuit probing
// again and again, its probe cycles in one event: the first break_elapsed transition
// (open to half-open), with LastAt the time of the latest transition of the run, To
// the state it left the circuit in, Cycles the probes admitted and FailedProbes the
// probes that failed. Collapsing them keeps an outage's opening in the journal
// however many short breaks follow it.
type Event struct {
	Destination transport.Destination
	breaker.Transition
	LastAt       time.Time // zero unless the event collapses probe cycles
	Cycles       int
	FailedProbes int
}

// probeCycle reports whether t is a step of a probe cycle: a break ending, or a
// probe failing.
func probeCycle(t breaker.Transition) bool {
	return t.From == breaker.Open && t.To == breaker.HalfOpen && t.Reason == breaker.ReasonBreakElapsed ||
		t.From == breaker.HalfOpen && t.To == breaker.Open && t.Reason == breaker.ReasonProbeFailed
}

// merge adds t to the probing event of d, if the destination's
// latest event is one (or starts one) and t continues it. Requires j.mu held.
func (j *Journal) merge(d transport.Destination, t breaker.Transition) bool {
	if !probeCycle(t) {
		return false
	}
	n := j.next
	if j.full {
		n = len(j.ring)
	}
	for k := 1; k <= n; k++ {
		e := &j.ring[(j.next-k+len(j.ring))%len(j.ring)]
		if _, part := registry.PartitionOfTransition(e.Transition); e.Destination != d || part {
			continue // a partition's event does not end its circuit's probing run
		}
		if e.Cycles == 0 || e.To != t.From {
			return false // the latest event of d is not a probing run that t continues
		}
		e.LastAt, e.To, e.Generation = t.At, t.To, t.Generation
		if t.To == breaker.HalfOpen {
			e.Cycles++
		} else {
			e.FailedProbes++
		}
		return true
	}
	return false
}

// NewJournal returns a Journal that keeps the last n transitions (n < 1 means 256).
func NewJournal(n int) *Journal {
	if n < 1 {
		n = 256
	}
	return &Journal{ring: make([]Event, n)}
}

// Record stores a transition (collapsing probe cycles, see Event); its signature
// fits registry.WithObserver.
func (j *Journal) Record(d transport.Destination, t breaker.Transition) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.merge(d, t) {
		return
	}
	e := Event{Destination: d, Transition: t}
	if t.From == breaker.Open && t.To == breaker.HalfOpen && t.Reason == breaker.ReasonBreakElapsed {
		e.Cycles, e.LastAt = 1, t.At // a probing run starts
	}
	j.ring[j.next] = e
	j.next = (j.next + 1) % len(j.ring)
	if j.next == 0 {
		j.full = true
	}
}

// Recent returns up to limit events, newest first.
func (j *Journal) Recent(limit int) []Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := j.next
	if j.full {
		n = len(j.ring)
	}
	n = min(n, limit)
	out := make([]Event, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, j.ring[(j.next-i+len(j.ring))%len(j.ring)])
	}
	return out
}
