// Package eventq delivers a circuit's transitions to its observers outside the
// circuit's locks, one at a time and in the order they happened.
package eventq

import "sync"

// Queue holds events pushed under a circuit's lock until Flush delivers them. Whoever
// flushes first delivers everything queued, including events that observers cause
// while it runs, so an observer may call back into the circuit. The zero Queue has no
// observers and costs nothing.
type Queue[T any] struct {
	Observers []func(T) // fixed before the first Push

	mu       sync.Mutex // guards pending and draining
	pending  []T
	draining bool
}

// Push queues e for the observers.
func (q *Queue[T]) Push(e T) {
	if len(q.Observers) == 0 {
		return
	}
	q.mu.Lock()
	q.pending = append(q.pending, e)
	q.mu.Unlock()
}

// Flush delivers the queued events unless another goroutine is already delivering
// them. Call it with no lock held.
func (q *Queue[T]) Flush() {
	if len(q.Observers) == 0 {
		return
	}
	q.mu.Lock()
	if q.draining {
		q.mu.Unlock()
		return
	}
	q.draining = true
	defer func() { // an observer that panics must not stop later deliveries
		q.mu.Lock()
		q.draining = false
		q.mu.Unlock()
	}()
	for len(q.pending) > 0 {
		batch := q.pending
		q.pending = nil
		q.mu.Unlock()
		for _, e := range batch {
			for _, f := range q.Observers {
				f(e)
			}
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
}
