package admission

import (
	"errors"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// ErrOverLimit is matched (errors.Is) by every refusal of a Limiter: a *LimitError.
var ErrOverLimit = errors.New("admission: over the adaptive limit")

// LimitError is the refusal of a call over an adaptive limit. errors.Is(err,
// ErrOverLimit) holds for it. NotBefore is when a slot is likely to have freed up:
// the refusal is immediate, the caller decides whether to come back. A Limiter hands
// out one LimitError per priority and millisecond of NotBefore, so that refusing
// allocates almost never; treat it as read-only.
type LimitError struct {
	NotBefore time.Time
	Bulk      bool // the refused call was bulk work
	msg       string
}

// Error says which kind of call was refused and when to come back.
func (e *LimitError) Error() string { return e.msg }

// Is reports whether target is ErrOverLimit or ErrRefused.
func (e *LimitError) Is(target error) bool { return target == ErrOverLimit || target == ErrRefused }

// Slot is what a call admitted by a Limiter holds: give it back with Release when
// the call ends. The zero Slot holds nothing.
type Slot struct {
	t   *slotToken
	seq uint64
}

// slotToken makes a slot's first Release detectable without allocating: slots borrow
// a token from a pool and carry the sequence number they were issued with. The first
// Release advances the sequence and returns the token; a later Release of that slot,
// or of a copy, finds a different sequence.
type slotToken struct {
	seq    atomic.Uint64
	lim    *Limiter
	start  int64
	weight int64
	bulk   bool
}

var slotTokens = sync.Pool{New: func() any { return new(slotToken) }}

// Release gives the slot back with how the call ended, and reports whether this was
// the slot's first Release: later ones, of the slot or of a copy, change nothing. It
// reads the clock.
func (s Slot) Release(r Result) bool { return s.ReleaseRecording(r, nil, Ignored) }

// ReleaseRecording is Release that also tells t how the call ended, as t.Record(verdict
// == Success) would (nothing for Ignored or a nil t), with the clock reading the
// release takes: a call's end then reads the clock once for both. It records only on
// the slot's first Release, and reports whether this was it.
func (s Slot) ReleaseRecording(r Result, t *Throttle, verdict Result) bool {
	tok := s.t
	if tok == nil || !tok.seq.CompareAndSwap(s.seq, s.seq+1) {
		return false
	}
	lim, start, w, bulk := tok.lim, tok.start, tok.weight, tok.bulk
	tok.lim = nil // the pool must not keep the limiter alive
	slotTokens.Put(tok)
	now := lim.now()
	lim.release(start, w, bulk, r, now)
	if t != nil && verdict != Ignored {
		// The throttle counts from its own epoch; both read one clock.
		t.recordAt(max(now+int64(lim.epoch.Sub(t.epoch)), 0), verdict == Success)
	}
	return true
}

// LimitStats is a point-in-time view of a Limiter.
type LimitStats struct {
	Limit, BulkLimit       int           // messages
	InFlight, BulkInFlight int           // messages
	Baseline, Recent       time.Duration // learned and last window's latency (0 while warming up)
	Ready                  bool          // the baseline has been learned
	Refused                uint64        // calls refused since creation
}

// Limiter is an adaptive concurrency limit in messages. Admission is lock-free and
// allocation-free (atomics only, one clock read for the call's start); a release
// reads the clock and, at most once per LimitPolicy.Window, takes a mutex to update
// the limit. It is safe for concurrent use.
//
// The controller, in the spirit of Netflix's Gradient2 and Envoy's adaptive
// concurrency filter:
//
//   - Baseline: a long average (over about 20 windows) of the mean latency of the
//     windows' online successes, halving toward a latency under half of it, so
//     that a lasting new normal becomes the baseline and noise does not count as
//     pressure.
//   - Recovery: when the destination's circuit closes after an outage, the limit
//     returns to what it was in the last healthy window, or more (Recovered).
//   - Start: the limit is Max, and stays there until latency or drops say otherwise;
//     until 10 online successes have been measured there is no baseline, so a cold
//     start (first publishes opening connections) contracts nothing but on drops.
//   - Healthy windows (recent <= Tolerance*baseline) explore upward by sqrt(limit)
//     when the limit is being used (in-flight peak >= half of it), up to twice the
//     recent in-flight demand (and Max). The limit never falls for lack of demand,
//     so a burst after a quiet spell finds the limit it had.
//   - Slow windows contract smoothly: limit*gradient + sqrt(limit), gradient =
//     Tolerance*baseline/recent within [0.5, 1], mixed 20 % into the limit; latency
//     alone never takes the limit below the demand the destination carried while
//     healthy, nor below twice what its healthy rate of successes keeps in flight at
//     the recent latency (Little's law), so slowness inside callers' deadlines keeps
//     its goodput; below that (after drops) windows without drops double it back.
//   - Drops (Dropped and Failure results) contract multiplicatively, by up to half
//     per window in proportion to their share of the window's calls, down to Min: a
//     hung destination loses its in-flight work.
//   - Bulk budget (bulk.go): its own AIMD controller, so that bulk work yields
//     first: it halves in every window with drops, shrinks while online latency is
//     past a share of the online calls' deadline (learned from their drops), and
//     grows by sqrt(budget) per window while bulk work uses it and online calls are
//     served. While bulk work is active and can still give way, the online limit
//     neither contracts for latency or drops (bulk work, the likely cause, is cut
//     instead) nor stops exploring.
type Limiter struct {
	p     LimitPolicy
	clock func() time.Time // nil: time.Since(epoch), which skips a wall-clock read
	epoch time.Time

	// Read by every admission, written once per window.
	limit     atomic.Int64 // messages
	bulkLimit atomic.Int64 // messages bulk calls may hold
	hint      atomic.Int64 // nanoseconds a refused caller is told to wait
	winStart  atomic.Int64
	_         [64]byte // the groups below are written by every call: keep them off this line

	inFlight     atomic.Int64 // messages of admitted calls not yet released
	peak         atomic.Int64 // highest inFlight since the last update
	bulkInFlight atomic.Int64
	bulkPeak     atomic.Int64 // highest bulkInFlight since the last update
	lastBulk     atomic.Int64 // when bulk work was last admitted or released
	refusals     atomic.Uint64
	bulkWake     atomic.Pointer[chan struct{}] // closed when bulk headroom may have grown (BulkWake)
	_            [64]byte

	// The current window, added to by releases. Every release with a verdict adds to
	// one of the stripes (win), picked by a hash of its clock reading as the
	// throttle's are, so that releases on different cores rarely write one line;
	// drops and misses are rarer and kept here.
	winDrops    atomic.Int64
	winMissed   atomic.Int64 // online calls dropped (count<<40 | latency sum in ms): their deadlines
	lastSuccess atomic.Int64 // when a call last succeeded, to the millisecond (nanoseconds since epoch; 0: never)
	warmed      atomic.Bool  // a call has ended with a verdict
	answered    atomic.Bool  // at least a quarter of the last window's verdicts were successes
	_           [64]byte

	refuseOnline, refuseBulk atomic.Pointer[LimitError] // cached per NotBefore slot

	win      []winStripe // written by releases; summed and reset by update
	winShift uint        // 64 - log2(len(win))

	mu       sync.Mutex // serializes updates; guards the fields below
	ready    bool       // the baseline exists
	warm     int64      // online successes measured during warm-up
	warmSum  int64
	baseline float64 // nanoseconds
	recent   float64 // last window's mean online latency, nanoseconds
	cur      float64 // the limit, unrounded
	demand   float64 // decaying peak of in-flight messages
	healthy  float64 // decaying peak of in-flight messages in healthy windows
	rate     float64 // decaying peak of online successes per nanosecond in healthy windows
	good     float64 // the limit in the last healthy window

	bulk bulkPacer // the bulk budget (bulk.go)
}

// winStripe is one stripe of a window's counts, 64 bytes: a slice of them is 64-byte
// aligned (its size class is a multiple of 64), so no two stripes share a cache line.
type winStripe struct {
	// counts packs the releases with a verdict (successes, failures, drops; low 32
	// bits) and the online successes measured (high 32 bits), so a release adds once.
	counts atomic.Int64
	sum    atomic.Int64 // the measured successes' latency, nanoseconds
	_      [48]byte
}

// stripe picks the window stripe a release at now adds to (see Throttle.stripe).
func (l *Limiter) stripe(now int64) *winStripe {
	return &l.win[uint64(now)*0x9E3779B97F4A7C15>>l.winShift]
}

// events returns the releases with a verdict in the current window, over every stripe.
func (l *Limiter) events() int64 {
	var n int64
	for i := range l.win {
		n += l.win[i].counts.Load() & (1<<32 - 1)
	}
	return n
}

const (
	limitWarmup       = 10   // online successes measured before the baseline exists
	limitBaselineAge  = 20   // windows over which a new latency becomes the baseline
	limitSmoothing    = 0.2  // share of a latency-driven target mixed into the limit
	limitDemandDecay  = 0.99 // per window
	limitMinGradient  = 0.5
	limitDemandFactor = 2  // the limit explores up to this multiple of recent demand
	limitMaxWindows   = 10 // a window with few events closes after this many Windows
	limitMinEvents    = 4  // events a window needs before it may close at one Window
)

// NewLimiter returns an adaptive limit of policy p, or nil when p turns it off. It
// reads time from now; nil reads the system's monotonic clock.
func NewLimiter(p LimitPolicy, now func() time.Time) *Limiter {
	if !p.Enabled() {
		return nil
	}
	p = p.normalized()
	n := stripes()
	l := &Limiter{p: p, clock: now, win: make([]winStripe, n), winShift: uint(64 - bits.TrailingZeros(uint(n)))}
	if now != nil {
		l.epoch = now()
	} else {
		l.epoch = time.Now()
	}
	l.cur = float64(p.Max)
	l.bulk.budget = l.bulkCap()
	l.limit.Store(int64(p.Max))
	l.bulkLimit.Store(max(int64(l.bulk.budget), 1))
	l.hint.Store(int64(p.Window))
	return l
}

func (l *Limiter) now() int64 {
	if l.clock == nil {
		return int64(time.Since(l.epoch))
	}
	return max(int64(l.clock().Sub(l.epoch)), 0)
}

// Acquire admits a call of weight messages (0 means 1) and priority pr, reading the
// clock once, or refuses it at once with a *LimitError. An online call is admitted
// when its messages and the online messages in flight fit under the limit, or when
// no online call is in flight (one call always fits an idle destination, however
// heavy); a bulk call when it fits under the bulk budget or is the only bulk call,
// and online calls do not fill the limit. Release the slot when the call ends.
func (l *Limiter) Acquire(weight int, pr Priority) (Slot, error) {
	now, w := l.now(), int64(max(weight, 1))
	if pr == Bulk {
		return l.admitBulk(now, w)
	}
	limit := l.limit.Load()
	for {
		n := l.inFlight.Load()
		if on := n - l.bulkInFlight.Load(); on > 0 && on+w > limit {
			return Slot{}, l.refuse(now, false)
		}
		if l.inFlight.CompareAndSwap(n, n+w) {
			if p := l.peak.Load(); n+w > p {
				l.peak.CompareAndSwap(p, n+w) // a lost race loses a sample of the peak, no more
			}
			break
		}
	}
	return l.slot(now, w, false), nil
}

// slot lends a token to the slot of a call admitted at now.
func (l *Limiter) slot(now, w int64, bulk bool) Slot {
	t := slotTokens.Get().(*slotToken)
	t.lim, t.start, t.weight, t.bulk = l, now, w, bulk
	return Slot{t: t, seq: t.seq.Load()}
}

// refuse returns the refusal of a call at now: one error per priority and NotBefore
// slot (the hint rounded up to a millisecond), so that refusing allocates once per slot.
func (l *Limiter) refuse(now int64, bulk bool) *LimitError {
	l.refusals.Add(1)
	const slot = int64(time.Millisecond)
	nb := (now + l.hint.Load() + slot - 1) / slot * slot
	c := &l.refuseOnline
	if bulk {
		c = &l.refuseBulk
	}
	if e := c.Load(); e != nil && int64(e.NotBefore.Sub(l.epoch)) == nb {
		return e
	}
	at := l.epoch.Add(time.Duration(nb))
	what := "admission: over the adaptive limit"
	if bulk {
		what = "admission: over the adaptive limit for bulk work"
	}
	e := &LimitError{NotBefore: at, Bulk: bulk, msg: what + " (retry after " + at.UTC().Format(time.RFC3339Nano) + ")"}
	c.Store(e)
	return e
}

// release gives back w messages of a call admitted at start that ended at now with
// result r, and closes the window when it is due.
func (l *Limiter) release(start, w int64, bulk bool, r Result, now int64) {
	l.inFlight.Add(-w)
	if bulk {
		l.releaseBulk(w, now)
	}
	if r != Success && r != Failure && r != Dropped { // Ignored: nothing to learn
		return
	}
	if !l.warmed.Load() {
		l.warmed.Store(true)
	}
	add := int64(1)
	st := l.stripe(now)
	if r == Success {
		if last := l.lastSuccess.Load(); last == 0 || now-last >= int64(time.Millisecond) {
			l.lastSuccess.Store(max(now, 1))
		}
		if !bulk {
			add |= 1 << 32
			st.sum.Add(max(now-start, 0))
		}
	} else {
		l.winDrops.Add(1)
	}
	if r == Dropped && !bulk { // an online call ended without an answer: learn the deadline
		l.winMissed.Add(1<<40 | min(max(now-start, 0)/int64(time.Millisecond), 1<<40-1))
	}
	done := st.counts.Add(add) & (1<<32 - 1)
	begun := l.winStart.Load()
	elapsed := now - begun
	if elapsed < int64(l.p.Window) {
		return
	}
	// A window with few events waits for more, up to limitMaxWindows; this stripe's
	// count is a lower bound of the window's, summed only when it is short.
	if done < limitMinEvents && elapsed < limitMaxWindows*int64(l.p.Window) && l.events() < limitMinEvents {
		return
	}
	if !l.mu.TryLock() { // another release is updating
		return
	}
	if l.winStart.Load() == begun {
		l.update(now)
	}
	l.mu.Unlock()
}

// update closes the window and moves the limit. Requires l.mu held.
func (l *Limiter) update(now int64) {
	var counts, sum int64
	for i := range l.win {
		counts += l.win[i].counts.Swap(0)
		sum += l.win[i].sum.Swap(0)
	}
	drops := l.winDrops.Swap(0)
	samples, done := counts>>32, counts&(1<<32-1)
	peak := float64(l.peak.Swap(l.inFlight.Load()))
	elapsed := max(now-l.winStart.Load(), 1)
	bulkPeak := float64(l.bulkPeak.Swap(l.bulkInFlight.Load()))
	bulkActive := bulkPeak > 0 && l.bulk.budget > 1 // bulk work in flight, and able to give way
	missed := l.winMissed.Swap(0)
	l.winStart.Store(now)
	if done > 0 {
		l.answered.Store(4*(done-drops) >= done)
	}
	p := l.p
	l.demand = max(peak, l.demand*limitDemandDecay)
	ceiling := min(float64(p.Max), max(float64(p.Min), limitDemandFactor*l.demand))

	if !l.ready {
		l.warmUp(samples, sum, drops, done, peak, bulkPeak, missed)
		l.publish()
		return
	}
	if samples > 0 {
		l.recent = float64(sum) / float64(samples)
		// A long average of the window means, not their minimum: a noisy
		// destination's luckiest window must not become a baseline that every later
		// window exceeds. It follows a fall to under half of it quickly.
		if l.recent < l.baseline/2 {
			l.baseline = (l.baseline + l.recent) / 2
		} else {
			l.baseline += (l.recent - l.baseline) / limitBaselineAge
		}
	}
	ratio := 1.0
	if samples > 0 && l.baseline > 0 {
		ratio = l.recent / l.baseline
	}
	var recent float64 // this window's online latency, if measured
	if samples > 0 {
		recent = l.recent
	}
	l.bulk.step(l.bulkCap(), drops > 0, bulkPeak, recent, missed)
	switch {
	case bulkActive && (drops > 0 || ratio > p.Tolerance):
		// This process's bulk work is in flight and can still give way: it is the
		// likely cause, and its budget was cut instead. Online calls keep their limit,
		// and explore while they use it (a drop-contracted limit comes back).
		if 2*peak >= l.cur && l.cur < ceiling {
			l.cur = min(l.cur+math.Sqrt(l.cur), ceiling)
		}
	case drops > 0:
		l.cur = max(float64(p.Min), l.cur*(1-0.5*float64(drops)/float64(max(done, 1))))
	case ratio <= p.Tolerance:
		l.healthy = max(peak, l.healthy*limitDemandDecay)
		l.rate = max(float64(samples)/float64(elapsed), l.rate*limitDemandDecay)
		l.good = l.cur
		if 2*peak >= l.cur && l.cur < ceiling { // explore, while the limit is used
			l.cur = min(l.cur+math.Sqrt(l.cur), ceiling)
		}
	default:
		gradient := min(max(p.Tolerance/ratio, limitMinGradient), 1)
		target := l.cur*gradient + math.Sqrt(l.cur)
		// Little's law: the healthy rate of successes at the recent latency keeps
		// rate*latency calls in flight. Latency alone must not refuse them (a broker
		// slow by a constant delay, every answer inside the deadline, keeps its
		// goodput), so the limit contracts no lower than twice that, and after drops
		// took it lower, windows without drops double it back.
		need := min(limitDemandFactor*l.rate*l.recent, float64(p.Max))
		if l.cur < need {
			l.cur = min(2*l.cur, need)
		} else {
			l.cur = max(l.cur*(1-limitSmoothing)+target*limitSmoothing, min(max(l.healthy, need), l.cur))
		}
	}
	l.cur = min(max(l.cur, float64(p.Min)), float64(p.Max))
	l.publish()
}

// warmUp moves the limit in a window that closes before the baseline exists, and
// establishes the baseline once enough online successes were measured. Requires
// l.mu held.
func (l *Limiter) warmUp(samples, sum, drops, done int64, peak, bulkPeak float64, missed int64) {
	p := l.p
	l.warm += samples
	l.warmSum += sum
	if drops > 0 {
		l.cur = max(float64(p.Min), l.cur*(1-0.5*float64(drops)/float64(max(done, 1))))
	} else if samples > 0 && 2*peak >= l.cur {
		// Answers and no drops: explore back up even before the baseline exists,
		// or a cold start's drops could keep the limit low until ten successes
		// have squeezed through.
		l.cur = min(l.cur+math.Sqrt(l.cur), float64(p.Max))
	}
	l.bulk.step(l.bulkCap(), drops > 0, bulkPeak, 0, missed)
	if l.warm >= limitWarmup {
		l.ready = true
		l.baseline = float64(l.warmSum) / float64(l.warm)
		l.recent = l.baseline
		l.healthy, l.good = l.demand, l.cur
	}
}

// publish stores the limits admission reads. Requires l.mu held.
func (l *Limiter) publish() {
	limit := max(int64(l.cur), int64(l.p.Min), 1)
	l.limit.Store(limit)
	l.publishBulk()
	if l.ready {
		l.hint.Store(min(max(int64(l.recent), int64(time.Millisecond)), int64(l.p.Window)))
	}
}

// Recovered tells the limiter that its destination's circuit closed after an
// outage: the drops that contracted the limit are over, so it returns to the limit
// of the last healthy window (when higher). Bulk work's budget is not restored: it
// grows back as online calls stay served, so that a backlog cannot swamp a broker
// that has just recovered. A registry calls it when the circuit's probe succeeds.
func (l *Limiter) Recovered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur = max(l.cur, l.good)
	l.publish()
}

// Cold reports whether no call has ended yet with a verdict (Success, Failure or
// Dropped): a call admitted now is part of the first wave of a process that has just
// started.
func (l *Limiter) Cold() bool { return !l.warmed.Load() }

// Busy reports whether a deadline that ended a call now may be blamed on this
// process's own bulk work rather than on the destination: bulk work is in flight or
// ended within the last second, and the destination answered a call with a success
// within that second. A hung destination answers nothing and is never busy.
func (l *Limiter) Busy() bool {
	if !l.Answered() {
		return false
	}
	last := l.lastBulk.Load()
	return l.bulkInFlight.Load() > 0 || last != 0 && l.now()-last <= int64(time.Second)
}

// Answered reports whether the destination answered a call with a success within the
// last second. A hung destination answers nothing.
func (l *Limiter) Answered() bool {
	last := l.lastSuccess.Load()
	return last != 0 && l.now()-last <= int64(time.Second)
}

// Answering reports whether the destination answers a good share of its calls in
// time: it Answered, and at least a quarter of the calls that ended in the last
// window succeeded (the others were dropped or failed). Such a destination is slow or
// overloaded, which the limit answers by contracting on every drop; one that answers
// less is sick.
func (l *Limiter) Answering() bool { return l.answered.Load() && l.Answered() }

// RetryAfter returns how long a refused caller is told to wait now: the recent
// latency, within [1ms, Window] (the Window until a baseline exists).
func (l *Limiter) RetryAfter() time.Duration { return time.Duration(l.hint.Load()) }

// Stats returns a view of the limiter.
func (l *Limiter) Stats() LimitStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := LimitStats{
		Limit: int(l.limit.Load()), BulkLimit: int(l.bulkLimit.Load()),
		InFlight: int(l.inFlight.Load()), BulkInFlight: int(l.bulkInFlight.Load()),
		Ready: l.ready, Refused: l.refusals.Load(),
	}
	if l.ready {
		s.Baseline, s.Recent = time.Duration(l.baseline), time.Duration(l.recent)
	}
	return s
}
