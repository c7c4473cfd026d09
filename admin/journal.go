package admin

import (
	"sync"

	"github.com/brokerguard/brokerguard/breaker"
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

// Event is one transition of one destination's circuit.
type Event struct {
	Destination transport.Destination
	breaker.Transition
}

// NewJournal returns a Journal that keeps the last n transitions (n < 1 means 256).
func NewJournal(n int) *Journal {
	if n < 1 {
		n = 256
	}
	return &Journal{ring: make([]Event, n)}
}

// Record stores a transition; its signature fits registry.WithObserver.
func (j *Journal) Record(d transport.Destination, t breaker.Transition) {
	j.mu.Lock()
	j.ring[j.next] = Event{Destination: d, Transition: t}
	j.next = (j.next + 1) % len(j.ring)
	if j.next == 0 {
		j.full = true
	}
	j.mu.Unlock()
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
