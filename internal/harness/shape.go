package harness

import (
	"sync"
	"time"
)

// shaper is the part of a Proxy that makes a healthy server slow without any error:
// a latency added to what the server sends, and a bandwidth bound on the link.
type shaper struct {
	smu     sync.Mutex    // guards the fields below
	latency time.Duration // added to every piece the server sends
	changed chan struct{} // closed and replaced when the latency changes
	rate    int           // bytes per second over the link, both directions; 0: unbounded
	free    time.Time     // when the link has sent everything reserved so far
}

// delayed is a piece of the stream, when the proxy read it, and whether the server
// sent it (only those are delayed).
type delayed struct {
	data       []byte
	read       time.Time
	fromServer bool
}

// SetLatency delays what the server sends by d (0 ends the delay), without touching
// the server: every round trip through the proxy takes d longer. The latency in force
// applies to everything still queued, as to a stalled broker that catches up when it
// recovers: when d falls, answers already held longer than d go out at once, in
// order.
func (p *Proxy) SetLatency(d time.Duration) {
	p.smu.Lock()
	p.latency = max(d, 0)
	if p.changed != nil {
		close(p.changed)
	}
	p.changed = make(chan struct{})
	p.smu.Unlock()
}

// SetRate bounds the bytes per second the proxy passes, both directions and all
// connections together, as a saturated link would (0 lifts the bound). A sender
// beyond the bound is slowed by TCP's own flow control, never refused.
func (p *Proxy) SetRate(bytesPerSecond int) {
	p.smu.Lock()
	p.rate = max(bytesPerSecond, 0)
	p.free = time.Time{} // what was reserved at the old rate is not charged again
	p.smu.Unlock()
}

// piece is how many bytes pipe forwards at a time: about 10ms of the link's rate
// (at least 512 bytes), so that a new rate applies within a few pieces.
func (p *Proxy) piece() int {
	p.smu.Lock()
	defer p.smu.Unlock()
	if p.rate == 0 {
		return 32 << 10
	}
	return max(512, p.rate/100)
}

// throttle waits until the link has sent n more bytes at its rate; it reports false
// if stop closed first.
func (p *Proxy) throttle(n int, stop <-chan struct{}) bool {
	p.smu.Lock()
	if p.rate == 0 {
		p.smu.Unlock()
		return true
	}
	now := time.Now()
	start := p.free
	if start.Before(now) {
		start = now
	}
	p.free = start.Add(time.Duration(float64(n) / float64(p.rate) * float64(time.Second)))
	done := p.free
	p.smu.Unlock()
	return wait(done, stop)
}

// hold waits until d may be written under the latency in force, however it changes
// meanwhile; it reports false if stop closed first.
func (p *Proxy) hold(d delayed, stop <-chan struct{}) bool {
	for d.fromServer {
		p.smu.Lock()
		due, changed := d.read.Add(p.latency), p.changed
		p.smu.Unlock()
		wait := time.Until(due)
		if wait <= 0 {
			break
		}
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-changed: // nil before the first SetLatency: never ready
		case <-stop:
			tm.Stop()
			return false
		}
		tm.Stop()
	}
	select {
	case <-stop:
		return false
	default:
		return true
	}
}

// wait sleeps until t (at once if it has passed); it reports false if stop closed
// first.
func wait(t time.Time, stop <-chan struct{}) bool {
	d := time.Until(t)
	if d <= 0 {
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-stop:
		return false
	}
}
