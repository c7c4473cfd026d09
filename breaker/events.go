package breaker

import "sync"

// eventQueue delivers transitions to observers outside the circuit's lock, one at a
// time and in the order they happened. Transitions are pushed under the circuit's lock;
// whoever flushes first delivers everything queued, including transitions that
// observers cause while it runs, so an observer may call back into the circuit.
type eventQueue struct {
	observers []func(Transition) // fixed after New

	mu       sync.Mutex // guards pending and draining
	pending  []Transition
	draining bool
}

func (q *eventQueue) push(t Transition) {
	if len(q.observers) == 0 {
		return
	}
	q.mu.Lock()
	q.pending = append(q.pending, t)
	q.mu.Unlock()
}

func (q *eventQueue) flush() {
	if len(q.observers) == 0 {
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
		for _, t := range batch {
			for _, f := range q.observers {
				f(t)
			}
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
}
