package breaker

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// LimitPolicy configures a circuit's adaptive concurrency limit (Policy.Limit): a bound
// on the messages in flight to the dependency at once that learns the dependency's
// healthy latency, contracts as latency rises or calls are dropped, and explores
// upward again when latency falls. The zero LimitPolicy turns the limit off; the
// values RecommendedLimit returns are the ones to start from.
//
// The limit counts messages, not calls: a call of a 100-message batch holds 100 of it
// (Request.Weight), so a batch and a single publish are weighed by the work they give
// the broker. Calls over the limit are refused at once with a *LimitError (errors.Is
// ErrSaturated) carrying a NotBefore; nothing waits.
//
// Bulk calls (Request.Priority Bulk, what the outbox sends) yield first: they hold
// a budget of their own, at most BulkShare of Max, that grows while online calls are
// served well within their deadlines and halves when calls are dropped (deadline
// misses, timeouts), so that a drain uses the capacity online calls leave and no
// more (limit_bulk.go). Online calls are bounded by the limit and never wait for bulk
// work's messages.
type LimitPolicy struct {
	// Max is the most messages the limit lets be in flight at once. 0 turns the
	// adaptive limit off (and every other field must then be zero).
	Max int
	// Min is the least the limit contracts to. 0 means 1.
	Min int
	// Tolerance is how many times the learned baseline latency the recent latency may
	// reach before the limit contracts, at least 1. 0 means 2.
	Tolerance float64
	// BulkShare is the most of Max that bulk calls may hold while the dependency is
	// healthy, within [0, 1]. 0 means 0.5.
	BulkShare float64
	// Window is the least time between two updates of the limit, at least 1ms. 0 means
	// 100ms.
	Window time.Duration
}

// RecommendedLimit returns the adaptive limit brokerguard recommends for broker
// publishers: up to 1,000 messages in flight per destination, contracting when
// latency passes twice its learned baseline, bulk work holding at most half of the
// limit. It is what breaker.DefaultPolicy uses.
func RecommendedLimit() LimitPolicy {
	return LimitPolicy{Max: 1000, Min: 1, Tolerance: 2, BulkShare: 0.5, Window: 100 * time.Millisecond}
}

// Enabled reports whether the limit is on (Max > 0).
func (lp LimitPolicy) Enabled() bool { return lp.Max > 0 }

// normalized writes out the "0 means" defaults of an enabled limit.
func (lp LimitPolicy) normalized() LimitPolicy {
	if lp.Max <= 0 {
		return LimitPolicy{}
	}
	if lp.Min == 0 {
		lp.Min = 1
	}
	if lp.Tolerance == 0 {
		lp.Tolerance = 2
	}
	if lp.BulkShare == 0 {
		lp.BulkShare = 0.5
	}
	if lp.Window == 0 {
		lp.Window = 100 * time.Millisecond
	}
	return lp
}

func (lp LimitPolicy) validate(bad func(field, format string, args ...any) error) error {
	switch {
	case lp.Max < 0:
		return bad("Limit.Max", "must not be negative (got %d)", lp.Max)
	case lp.Max == 0 && lp != LimitPolicy{}:
		return bad("Limit.Max", "must be positive when another Limit field is set (0 turns the limit off)")
	case lp.Max == 0:
		return nil
	case lp.Min < 0:
		return bad("Limit.Min", "must not be negative (got %d)", lp.Min)
	case lp.Min > lp.Max:
		return bad("Limit.Min", "must not exceed Limit.Max (%d > %d)", lp.Min, lp.Max)
	case math.IsNaN(lp.Tolerance) || math.IsInf(lp.Tolerance, 0) || lp.Tolerance != 0 && lp.Tolerance < 1:
		return bad("Limit.Tolerance", "must be at least 1, or 0 for 2 (got %v)", lp.Tolerance)
	case math.IsNaN(lp.BulkShare) || lp.BulkShare < 0 || lp.BulkShare > 1:
		return bad("Limit.BulkShare", "must be within [0, 1] (got %v)", lp.BulkShare)
	case lp.Window < 0 || lp.Window > 0 && lp.Window < time.Millisecond:
		return bad("Limit.Window", "must be at least 1ms, or 0 for 100ms (got %v)", lp.Window)
	}
	return nil
}

// Priority says whose call it is: online calls (a request being served) or bulk work
// (an outbox drain, a backfill), which yields first when the dependency is under
// pressure.
type Priority uint8

// The priorities of a call.
const (
	// Online is the zero Priority: a call someone is waiting for.
	Online Priority = iota
	// Bulk is work that can wait: it may use only the share of the limit that online
	// calls leave (LimitPolicy.BulkShare), which shrinks under pressure.
	Bulk
)

// String returns "online" or "bulk".
func (p Priority) String() string {
	if p == Bulk {
		return "bulk"
	}
	return "online"
}

type priorityKey struct{}

// WithPriority returns a context that marks the calls made with it as of priority p.
// Guarded publishers read the mark only when the destination's circuit has an
// adaptive limit; the outbox marks its publishes Bulk.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityOf returns the priority ctx was marked with (WithPriority), Online when none.
func PriorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

// Request describes one call to a circuit that has an adaptive limit: its weight in
// messages (a batch of 100 weighs 100; 0 means 1) and its priority. Circuits without
// a limit ignore it.
type Request struct {
	Weight   int
	Priority Priority
}

// RequestAcquirer is a circuit that takes a Request; *Breaker and the shared engine's
// circuits are. Registries use it only for circuits whose limit is on.
type RequestAcquirer interface {
	AcquireRequest(ctx context.Context, r Request) (Permit, error)
}

// Limited is a circuit that has an adaptive limit; Limiter returns nil when the
// policy turns it off.
type Limited interface {
	Limiter() *Limiter
}

// LimitError is the refusal of a call over a circuit's adaptive limit. errors.Is(err,
// ErrSaturated) holds for it. NotBefore is when a slot is likely to have freed up: the
// refusal is immediate, the caller decides whether to come back.
type LimitError struct {
	Identity  string
	Scope     Scope
	NotBefore time.Time
	Bulk      bool // the refused call was bulk work
	msg       string
}

// Error reports the circuit and when to come back.
func (e *LimitError) Error() string { return e.msg }

// Is reports whether target is ErrSaturated.
func (e *LimitError) Is(target error) bool { return target == ErrSaturated }

// LimitSlot is what a call admitted by a Limiter holds; give it back with Release.
// The zero LimitSlot holds nothing.
type LimitSlot struct {
	lim    *Limiter
	start  int64
	weight int32
	bulk   bool
}

// Held reports whether the slot holds part of a limit.
func (s LimitSlot) Held() bool { return s.lim != nil }

// Limiter is an adaptive concurrency limit in messages. Admission is lock-free and
// allocation-free (atomics only, one clock read for the call's start); completion
// reads the clock and, at most once per LimitPolicy.Window, takes a mutex to update
// the limit. A Breaker makes one when Policy.Limit is on; the shared engine makes one
// per process (the limit is never shared between processes: each bounds its own
// in-flight work). It is safe for concurrent use.
//
// The controller, in the spirit of Netflix's Gradient2 and Envoy's adaptive
// concurrency filter:
//
//   - Baseline: a long average (over about 20 windows) of the mean latency of the
//     windows' online successes, halving toward a latency under half of it, so
//     that a lasting new normal becomes the baseline and noise does not count as
//     pressure.
//   - Recovery: when the circuit closes after an outage (a probe succeeded) the limit
//     returns to what it was in the last healthy window, or more (Recovered); a
//     ramp (Policy.RampDuration) then paces it.
//   - Start: the limit is Max, and stays there until latency or drops say otherwise;
//     until 10 online successes have been measured there is no baseline, so a cold
//     start (first publishes opening connections) contracts nothing but on drops.
//   - Healthy windows (recent <= Tolerance*baseline) explore upward by sqrt(limit)
//     when the limit is being used (in-flight peak >= half of it), up to twice the
//     recent in-flight demand (and Max). The limit never falls for lack of demand,
//     so a burst after a quiet spell finds the limit it had.
//   - Slow windows contract smoothly: limit*gradient + sqrt(limit), gradient =
//     Tolerance*baseline/recent within [0.5, 1], mixed 20 % into the limit; latency
//     alone never takes the limit below the demand the dependency carried while
//     healthy, nor below twice what its healthy rate of successes keeps in flight at
//     the recent latency (Little's law), so slowness inside callers' deadlines keeps
//     its goodput; below that (after drops) windows without drops double it back.
//   - Drops (calls ended by a timeout or deadline, and Failures) contract
//     multiplicatively, by up to half per window in proportion to their share of the
//     window's calls, down to Min: a hung dependency loses its in-flight work.
//   - Bulk budget (limit_bulk.go): its own AIMD controller, so that bulk work yields
//     first: it halves in every window with drops, shrinks while online latency is
//     past a share of the online calls' deadline (learned from their drops), and
//     grows by sqrt(budget) per window while bulk work uses it and online calls are
//     served. While bulk work is active and can still give way, the online limit
//     neither contracts for latency or drops (bulk work, the likely cause, is cut
//     instead) nor stops exploring.
type Limiter struct {
	identity string
	scope    Scope
	p        LimitPolicy
	clock    Clock
	epoch    time.Time

	// Read by every admission, written once per window.
	limit     atomic.Int64 // messages
	bulkLimit atomic.Int64 // messages bulk calls may hold
	hint      atomic.Int64 // nanoseconds a refused caller is told to wait
	winStart  atomic.Int64
	share     atomic.Uint64 // float64 bits: the share of the limit a ramp admits now (1 without one)
	_         [64]byte      // the groups below are written by every call: keep them off this line

	inFlight     atomic.Int64 // messages of admitted calls not yet released
	peak         atomic.Int64 // highest inFlight since the last update
	bulkInFlight atomic.Int64
	bulkPeak     atomic.Int64 // highest bulkInFlight since the last update
	lastBulk     atomic.Int64 // when bulk work was last admitted or released
	refusals     atomic.Uint64
	bulkWake     atomic.Pointer[chan struct{}] // closed when bulk headroom may have grown (BulkWake)
	_            [64]byte

	// The current window, added to by completions. winCounts packs the completions
	// with a verdict (successes, failures, drops; low 32 bits) and the online
	// successes measured (high 32 bits), so that a completion adds once.
	winCounts   atomic.Int64
	winSum      atomic.Int64 // the measured successes' latency, nanoseconds
	winDrops    atomic.Int64
	winMissed   atomic.Int64 // online calls dropped (count<<40 | latency sum in ms): their deadlines
	lastSuccess atomic.Int64 // when a call last succeeded, to the millisecond (nanoseconds since epoch; 0: never)
	warmed      atomic.Bool  // a call has completed with a verdict
	answered    atomic.Bool  // at least a quarter of the last window's verdicts were successes
	_           [64]byte

	refuseOnline, refuseBulk atomic.Pointer[LimitError] // cached per NotBefore slot

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
	readyAt  int64   // when the baseline was established

	bulk bulkPacer // the bulk budget (limit_bulk.go)
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

// NewLimiter returns the adaptive limit of a circuit named identity, or nil when p
// turns it off. It reads time from clock (nil: time.Now). Backends that keep a
// circuit's state elsewhere use it to bound their own process's calls.
func NewLimiter(identity string, scope Scope, p LimitPolicy, clock Clock) *Limiter {
	var epoch time.Time
	if clock != nil {
		epoch = clock.Now()
	} else {
		epoch = time.Now()
	}
	return newLimiter(identity, scope, p, clock, epoch)
}

func newLimiter(identity string, scope Scope, p LimitPolicy, clock Clock, epoch time.Time) *Limiter {
	if !p.Enabled() {
		return nil
	}
	p = p.normalized()
	l := &Limiter{identity: identity, scope: scope, p: p, clock: clock, epoch: epoch}
	l.cur = float64(p.Max)
	l.bulk.budget = l.bulkCap()
	l.limit.Store(int64(p.Max))
	l.bulkLimit.Store(max(int64(l.bulk.budget), 1))
	l.hint.Store(int64(p.Window))
	l.share.Store(math.Float64bits(1))
	return l
}

func (l *Limiter) now() int64 {
	if l.clock == nil {
		return int64(time.Since(l.epoch))
	}
	return max(int64(l.clock.Now().Sub(l.epoch)), 0)
}

// Policy returns the limit's policy with defaults written out.
func (l *Limiter) Policy() LimitPolicy { return l.p }

// Acquire admits a call of r.Weight messages, reading the clock once, or refuses it at
// once with a *LimitError. Release the slot when the call ends.
func (l *Limiter) Acquire(r Request) (LimitSlot, error) {
	return l.admit(l.now(), r, 1)
}

// admit takes r's messages from the limit, scaled by share (a ramp's, in (0, 1]).
// An online call is admitted when its messages and the online calls' in flight fit
// under the limit, or when no online call is in flight (one call always fits an idle
// destination, however heavy); a bulk call when it fits under the bulk budget (also
// scaled by a ramp) or is the only bulk call.
func (l *Limiter) admit(now int64, r Request, share float64) (LimitSlot, error) {
	w := int64(max(r.Weight, 1))
	bulk := r.Priority == Bulk
	limit := l.limit.Load()
	if cur := l.share.Load(); cur != math.Float64bits(share) {
		l.share.Store(math.Float64bits(share)) // for BulkHeadroom
	}
	if share < 1 {
		limit = max(int64(share*float64(limit)), 1)
	}
	if bulk {
		return l.admitBulk(now, w, share, limit)
	}
	for {
		n := l.inFlight.Load()
		if on := n - l.bulkInFlight.Load(); on > 0 && on+w > limit {
			return LimitSlot{}, l.refuse(now, false)
		}
		if l.inFlight.CompareAndSwap(n, n+w) {
			if p := l.peak.Load(); n+w > p {
				l.peak.CompareAndSwap(p, n+w) // a lost race loses a sample of the peak, no more
			}
			break
		}
	}
	return LimitSlot{lim: l, start: now, weight: int32(min(w, math.MaxInt32))}, nil
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
	if e := c.Load(); e != nil && l.nanosAt(e.NotBefore) == nb {
		return e
	}
	at := l.epoch.Add(time.Duration(nb))
	what := "breaker: over the adaptive limit: "
	if bulk {
		what = "breaker: over the adaptive limit for bulk work: "
	}
	e := &LimitError{Identity: l.identity, Scope: l.scope, NotBefore: at, Bulk: bulk,
		msg: what + l.identity + " (retry after " + at.UTC().Format(time.RFC3339Nano) + ")"}
	c.Store(e)
	return e
}

func (l *Limiter) nanosAt(t time.Time) int64 { return int64(t.Sub(l.epoch)) }

// Verdicts a completion gives the limiter.
const (
	limitIgnore  = iota // the caller gave up, or a Neutral outcome: release only
	limitSuccess        // a latency sample
	limitDrop           // a timeout, a deadline, a dropped call or a Failure: contract
)

// Release gives back the slot of a call that ended with outcome o; dropped says the
// call ended by a timeout or deadline, or was dropped, without a verdict on the
// dependency (the circuit took it as Neutral): the limit takes it as a drop all the
// same. It reads the clock. A zero slot, or a second Release of a copy, must not be
// passed: permits do this exactly once.
func (l *Limiter) Release(s LimitSlot, o Outcome, dropped bool) {
	v := limitIgnore
	switch {
	case dropped || o == Failure:
		v = limitDrop
	case o == Success:
		v = limitSuccess
	}
	l.release(s, v, dropped, l.now())
}

func (l *Limiter) release(s LimitSlot, verdict int, dropped bool, now int64) {
	w := int64(s.weight)
	l.inFlight.Add(-w)
	if s.bulk {
		l.releaseBulk(w, now)
	}
	if verdict == limitIgnore {
		return
	}
	if !l.warmed.Load() {
		l.warmed.Store(true)
	}
	add := int64(1)
	switch verdict {
	case limitSuccess:
		if last := l.lastSuccess.Load(); last == 0 || now-last >= int64(time.Millisecond) {
			l.lastSuccess.Store(max(now, 1))
		}
		if !s.bulk {
			add |= 1 << 32
			l.winSum.Add(max(now-s.start, 0))
		}
	case limitDrop:
		l.winDrops.Add(1)
	}
	if dropped && !s.bulk { // an online call ended by its deadline: learn the deadline
		l.winMissed.Add(1<<40 | min(max(now-s.start, 0)/int64(time.Millisecond), 1<<40-1))
	}
	done := l.winCounts.Add(add) & (1<<32 - 1)
	start := l.winStart.Load()
	elapsed := now - start
	if elapsed < int64(l.p.Window) || done < limitMinEvents && elapsed < limitMaxWindows*int64(l.p.Window) {
		return
	}
	if !l.mu.TryLock() { // another completion is updating
		return
	}
	if l.winStart.Load() == start {
		l.update(now)
	}
	l.mu.Unlock()
}

// update closes the window and moves the limit. Requires l.mu held.
func (l *Limiter) update(now int64) {
	counts, sum, drops := l.winCounts.Swap(0), l.winSum.Swap(0), l.winDrops.Swap(0)
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
			l.ready, l.readyAt = true, now
			l.baseline = float64(l.warmSum) / float64(l.warm)
			l.recent = l.baseline
			l.healthy, l.good = l.demand, l.cur
		}
		l.publish()
		return
	}
	if samples > 0 {
		l.recent = float64(sum) / float64(samples)
		// A long average of the window means, not their minimum: a noisy
		// dependency's luckiest window must not become a baseline that every later
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

// publish stores the limits admission reads. Requires l.mu held.
func (l *Limiter) publish() {
	limit := max(int64(l.cur), int64(l.p.Min), 1)
	l.limit.Store(limit)
	l.publishBulk()
	if l.ready {
		l.hint.Store(min(max(int64(l.recent), int64(time.Millisecond)), int64(l.p.Window)))
	}
}

// Recovered tells the limiter that its circuit closed after an outage: the drops
// that contracted the limit are over, so it returns to the limit of the last healthy
// window (when higher). Bulk work's budget is not restored: it grows back as online
// calls stay served, so that a backlog cannot swamp a broker that has just
// recovered. A Breaker calls it; a backend may.
func (l *Limiter) Recovered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur = max(l.cur, l.good)
	l.publish()
}

// Cold reports whether no call has completed yet with a verdict: a call admitted
// now is part of the first wave of a process that has just started.
func (l *Limiter) Cold() bool { return !l.warmed.Load() }

// Busy reports whether a deadline that ended a call now may be blamed on this
// process's own bulk work rather than on the dependency: bulk work is in flight or
// ended within the last second, and the dependency answered a call with a success
// within that second. A hung dependency answers nothing and is never busy.
func (l *Limiter) Busy() bool {
	if !l.Answered() {
		return false
	}
	last := l.lastBulk.Load()
	return l.bulkInFlight.Load() > 0 || last != 0 && l.now()-last <= int64(time.Second)
}

// Answered reports whether the dependency answered a call with a success within the
// last second. A hung dependency answers nothing.
func (l *Limiter) Answered() bool {
	last := l.lastSuccess.Load()
	return last != 0 && l.now()-last <= int64(time.Second)
}

// Answering reports whether the dependency answers a good share of its calls in time:
// it Answered, and at least a quarter of the calls that ended in the last window
// succeeded (the others missed their deadlines, were dropped or failed). Such a
// dependency is slow or overloaded, which the limit answers by contracting on every
// miss; one that answers less is sick.
func (l *Limiter) Answering() bool { return l.answered.Load() && l.Answered() }

// BulkHeadroom returns how many messages a bulk call could take now without being
// refused: what the bulk budget has left (all of it when no bulk work is in flight),
// within the limit scaled by the share of a ramp after recovery (as last seen by an
// admission); none while online calls fill the limit. The outbox sizes its batches by
// it.
func (l *Limiter) BulkHeadroom() int {
	bl, limit := l.bulkLimit.Load(), l.limit.Load()
	if share := math.Float64frombits(l.share.Load()); share < 1 { // a ramp paces messages
		limit = max(int64(share*float64(limit)), 1)
		bl = min(bl, limit)
	}
	b := l.bulkInFlight.Load()
	if l.inFlight.Load()-b >= limit {
		return 0
	}
	if b > 0 {
		return int(max(bl-b, 0))
	}
	return int(bl)
}

// RetryAfter returns how long a refused caller is told to wait now.
func (l *Limiter) RetryAfter() time.Duration { return time.Duration(l.hint.Load()) }

// BaselineSince returns when the limiter learned its baseline latency, and false
// while it is still warming up.
func (l *Limiter) BaselineSince() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch.Add(time.Duration(l.readyAt)), l.ready
}

// LimitStats is a point-in-time view of a Limiter.
type LimitStats struct {
	Limit, BulkLimit       int           // messages
	InFlight, BulkInFlight int           // messages
	Baseline, Recent       time.Duration // learned and last window's latency (0 while warming up)
	Ready                  bool          // the baseline has been learned
	Refused                uint64        // calls refused since creation
}

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
