package admission

import (
	"math"
	"time"
)

// Bulk work (priority Bulk: an outbox drain, a backfill) yields first, but uses the
// capacity online calls leave. It does not take a share of the online limit: the
// limit contracts as online latency rises, and a broker busy with a drain is slow for
// online calls precisely because of the drain, so a share of it shrinks the drain to
// a trickle long before online calls are in danger. Bulk work holds a budget of its
// own instead, in messages, that an AIMD controller moves once per window by what
// online calls see:
//
//   - a window with drops (Dropped and Failure results) halves it;
//   - a window whose online latency is past limitBulkTarget of the online calls'
//     deadline (learned from the latency of online calls that were dropped) shrinks it
//     in proportion (by half at most);
//   - a window in which bulk work used at least half of it grows it by up to
//     sqrt(budget), less as online latency nears that target;
//   - it stays within [1, BulkShare*Max].
//
// The online limit in turn does not count bulk messages, and while bulk work is in
// flight and above its floor the online limit is not contracted by latency or drops
// (update): bulk work gives way first. A hung destination answers nothing: its drops
// take the budget to 1 within a second, then contract the online limit as before.
type bulkPacer struct {
	budget   float64 // messages bulk work may hold
	deadline float64 // online calls' deadline, nanoseconds, learned from their drops (0: none seen)
}

const (
	limitBulkTarget       = 0.4 // share of the online deadline online latency may reach while bulk work grows
	limitBulkDeadlineRate = 0.25
)

// bulkCap is the most the bulk budget reaches.
func (l *Limiter) bulkCap() float64 { return max(float64(l.p.Max)*l.p.BulkShare, 1) }

// step moves the budget at the end of a window: dropped says the window had drops,
// peak is the most bulk messages in flight during it, recent the window's mean online
// latency (0: not measured), and missed the online calls dropped (count<<40 | latency
// sum in milliseconds).
func (bp *bulkPacer) step(ceiling float64, dropped bool, peak, recent float64, missed int64) {
	if n := missed >> 40; n > 0 {
		mean := float64(missed&(1<<40-1)) / float64(n) * float64(time.Millisecond)
		if bp.deadline == 0 {
			bp.deadline = mean
		} else {
			bp.deadline += (mean - bp.deadline) * limitBulkDeadlineRate
		}
	}
	target := bp.deadline * limitBulkTarget
	switch {
	case dropped:
		bp.budget /= 2
	case target > 0 && recent > target:
		bp.budget *= max(target/recent, 0.5)
	case 2*peak >= bp.budget: // used: grow, more slowly as online latency nears the target
		growth := 1.0
		if target > 0 && recent > 0 {
			growth = 1 - recent/target
		}
		bp.budget += math.Sqrt(bp.budget) * growth
	}
	bp.budget = min(max(bp.budget, 1), ceiling)
}

// admitBulk takes w messages for a bulk call admitted at now: they must fit under the
// bulk budget, unless no bulk call is in flight; and online calls must not fill the
// limit (then the destination is at capacity for them, and bulk work waits).
func (l *Limiter) admitBulk(now, w int64) (Slot, error) {
	bl := l.bulkLimit.Load()
	if l.inFlight.Load()-l.bulkInFlight.Load() >= l.limit.Load() {
		return Slot{}, l.refuse(now, true)
	}
	for {
		n := l.bulkInFlight.Load()
		if n > 0 && n+w > bl {
			return Slot{}, l.refuse(now, true)
		}
		if l.bulkInFlight.CompareAndSwap(n, n+w) {
			if p := l.bulkPeak.Load(); n+w > p {
				l.bulkPeak.CompareAndSwap(p, n+w)
			}
			break
		}
	}
	l.inFlight.Add(w)
	if l.lastBulk.Load() != now {
		l.lastBulk.Store(now)
	}
	return l.slot(now, w, true), nil
}

// releaseBulk gives back w bulk messages at now, and wakes bulk callers waiting for
// headroom.
func (l *Limiter) releaseBulk(w, now int64) {
	l.bulkInFlight.Add(-w)
	if l.lastBulk.Load() != now {
		l.lastBulk.Store(now)
	}
	l.wakeBulk()
}

// publishBulk stores the bulk budget admission reads, and wakes bulk callers when it
// grew. Requires l.mu held.
func (l *Limiter) publishBulk() {
	b := max(int64(l.bulk.budget), 1)
	if l.bulkLimit.Swap(b) < b {
		l.wakeBulk()
	}
}

// BulkHeadroom returns how many messages a bulk call could take now without being
// refused: what the bulk budget has left (all of it when no bulk work is in flight);
// none while online calls fill the limit. The outbox sizes its batches by it.
func (l *Limiter) BulkHeadroom() int {
	bl, limit := l.bulkLimit.Load(), l.limit.Load()
	b := l.bulkInFlight.Load()
	if l.inFlight.Load()-b >= limit {
		return 0
	}
	if b > 0 {
		return int(max(bl-b, 0))
	}
	return int(bl)
}

// BulkWake returns a channel that is closed the next time bulk headroom may have
// grown: a bulk call gave its messages back, or the bulk budget rose. A bulk caller
// that found no headroom (BulkHeadroom, a bulk *LimitError) waits on it, taken before
// it looked, instead of polling.
func (l *Limiter) BulkWake() <-chan struct{} {
	for {
		if c := l.bulkWake.Load(); c != nil {
			return *c
		}
		c := make(chan struct{})
		if l.bulkWake.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

func (l *Limiter) wakeBulk() {
	if l.bulkWake.Load() == nil {
		return
	}
	if c := l.bulkWake.Swap(nil); c != nil {
		close(*c)
	}
}
