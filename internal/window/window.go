// Package window counts calls and failures over a trailing time window with additive
// buckets: recording and reading cost O(1) amortized and memory is fixed, however many
// calls the window holds.
package window

// Buckets is the number of buckets a window is divided into; the window's edge is
// exact to one bucket width.
const Buckets = 10

// Counts are the totals held by a window.
type Counts struct {
	Calls    int64 // successes and failures
	Failures int64
}

type bucket struct {
	epoch int64 // which bucket-width slot of time these counts belong to
	Counts
}

// Window holds the counts of the last span of time. It is not safe for concurrent
// use; callers hold their own lock. The zero Window is not usable: use New.
type Window struct {
	width   int64 // nanoseconds per bucket
	head    int64 // newest epoch written or cleared
	buckets [Buckets]bucket
	total   Counts // sum of every bucket whose epoch lies in (head-Buckets, head]
}

// New returns a window spanning span nanoseconds (at least Buckets).
func New(span int64) *Window {
	w := &Window{width: max(span/Buckets, 1)}
	w.Reset(0)
	return w
}

// Reset empties the window as of time now (nanoseconds).
func (w *Window) Reset(now int64) {
	w.head = now / w.width
	w.total = Counts{}
	for i := range w.buckets {
		w.buckets[i] = bucket{epoch: w.head}
	}
}

// advance drops the buckets that fell out of the window by time now. Time that goes
// backwards (a wall clock stepped back) is treated as the newest epoch.
func (w *Window) advance(now int64) {
	epoch := now / w.width
	if epoch <= w.head {
		return
	}
	steps := min(epoch-w.head, Buckets)
	for e := epoch - steps + 1; e <= epoch; e++ {
		b := &w.buckets[uint64(e)%Buckets]
		w.total.Calls -= b.Calls
		w.total.Failures -= b.Failures
		*b = bucket{epoch: e}
	}
	w.head = epoch
}

// Record adds one call at time now.
func (w *Window) Record(now int64, failure bool) Counts {
	w.advance(now)
	b := &w.buckets[uint64(w.head)%Buckets]
	b.Calls++
	w.total.Calls++
	if failure {
		b.Failures++
		w.total.Failures++
	}
	return w.total
}

// Totals returns the counts inside the window as of time now.
func (w *Window) Totals(now int64) Counts {
	w.advance(now)
	return w.total
}
