// Package eventq delivers a circuit's transitions to its observers outside the
// circuit's locks, one at a time and in the order they happened.
package eventq

import (
	"slices"
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
	observers atomic.Pointer[observers[T]]

	mu       sync.Mutex // guards pending and draining
	pending  []T
	draining bool
}

// observers are the functions called with each event, and the key each was added
// under (nil for none), index for index.
type observers[T any] struct {
	keys []any
	fns  []func(T)
}

// Observe adds f to the observers. Events already delivered are not replayed to f;
// events pushed but not yet flushed reach it too.
func (q *Queue[T]) Observe(f func(T)) { q.ObserveAs(nil, f) }

// ObserveAs is Observe, except that f replaces the observer added earlier under the
// same non-nil key, if any: whoever may attach again (a registry that evicted a
// circuit and is handed the same one back) keeps one observer, not one per attach.
func (q *Queue[T]) ObserveAs(key any, f func(T)) {
	for {
		old := q.observers.Load()
		next := &observers[T]{}
		if old != nil {
			next.keys = append(next.keys, old.keys...)
			next.fns = append(next.fns, old.fns...)
		}
		if i := slices.Index(next.keys, key); key != nil && i >= 0 {
			next.fns[i] = f
		} else {
			next.keys = append(next.keys, key)
			next.fns = append(next.fns, f)
		}
		if q.observers.CompareAndSwap(old, next) {
			return
		}
	}
}

func (q *Queue[T]) list() []func(T) {
	if p := q.observers.Load(); p != nil {
		return p.fns
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
