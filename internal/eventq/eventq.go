// Package eventq delivers a circuit's transitions to its observers outside the
// circuit's locks, one at a time and in the order they happened.
package eventq

import (
	"sync"
	"sync/atomic"
)

// Queue holds events pushed under a circuit's lock until Flush delivers them. Whoever
// flushes first delivers everything queued, including events that observers cause
// while it runs, so an observer may call back into the circuit. The zero Queue has no
// observers and costs nothing.
type Queue[T any] struct {
	// observers is replaced, never changed in place, so Push and Flush read it without
	// a lock and an observer can be added while the circuit is in use (a registry adds
	// its own to a circuit a factory made).
	observers atomic.Pointer[[]func(T)]

	mu       sync.Mutex // guards pending and draining
	pending  []T
	draining bool
}

// Observe adds f to the observers. Events pushed before it are not replayed to f.
func (q *Queue[T]) Observe(f func(T)) {
	for {
		old := q.observers.Load()
		var next []func(T)
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, f)
		if q.observers.CompareAndSwap(old, &next) {
			return
		}
	}
}

func (q *Queue[T]) list() []func(T) {
	if p := q.observers.Load(); p != nil {
		return *p
	}
	return nil
}

// Push queues e for the observers.
func (q *Queue[T]) Push(e T) {
	if len(q.list()) == 0 {
		return
	}
	q.mu.Lock()
	q.pending = append(q.pending, e)
	q.mu.Unlock()
}

// Flush delivers the queued events unless another goroutine is already delivering
// them. Call it with no lock held.
func (q *Queue[T]) Flush() {
	if len(q.list()) == 0 {
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
			for _, f := range q.list() {
				f(e)
			}
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
}
