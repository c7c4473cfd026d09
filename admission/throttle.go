package admission

import (
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// ThrottlePolicy configures a Throttle: client-side adaptive throttling in the spirit
// of the SRE book's "Handling Overload" and Envoy's admission_control filter. Over a
// short trailing window the throttle refuses a call with probability
//
//	max(0, (sent - K*accepted) / (sent + 1))
//
// where sent counts the calls that were sent and came back with a verdict, and
// accepted those the destination accepted. The zero ThrottlePolicy turns the
// throttle off; DefaultThrottlePolicy returns the values to start from.
//
// Only calls actually sent count, never the ones the throttle (or a circuit, or a
// limit) refused. The SRE book counts every request the client attempted; when the
// failures are random rather than caused by load, that feeds on itself: refusing
// lowers accepted but not attempted, which raises the probability, which refuses
// more, until (for K*(1-failure share) < 1) the client refuses nearly everything
// while the destination would have accepted part of it. Counting sent calls only, the
// probability settles at about 1 - K*(share accepted), whatever it refused before.
type ThrottlePolicy struct {
	// K is how many times the accepted calls the sent ones may reach before the
	// throttle refuses any: it refuses only while the destination accepts less than
	// 1/K of what is sent. At least 1; 0 turns the throttle off (every other field
	// must then be zero). DefaultThrottlePolicy uses 3: a destination accepting 40 %
	// (a 60 % brownout) is not throttled at all, one accepting 10 % is refused about
	// 70 % of calls, one accepting 1 % about 97 %.
	K float64
	// Window is the trailing time the throttle judges by, kept in 8 buckets: the
	// probability is revised at most once per Window/8, so a destination's return is
	// seen within about a Window. At least 8ms; 0 means 1s.
	Window time.Duration
	// MinSent is how many sent calls the window must hold before the throttle starts
	// refusing, so that low traffic is never refused on a handful of samples. Once it
	// refuses, it goes on judging by what the window holds, however little, until the
	// probability comes back to 0. At least 1; 0 means 20.
	MinSent int
}

// DefaultThrottlePolicy returns the throttle brokerguard recommends for broker
// publishers: K 3 over a 1 s window, refusing nothing before 20 sent calls. Measured
// on the package's closed-loop model, a brownout failing 10, 30 or 60 % of calls keeps
// the goodput of no throttle, while a destination accepting 10 % or less has most of
// its load taken off.
func DefaultThrottlePolicy() ThrottlePolicy {
	return ThrottlePolicy{K: throttleDefaultK, Window: throttleDefaultWindow, MinSent: throttleDefaultMinSent}
}

const (
	throttleDefaultK       = 3
	throttleDefaultWindow  = time.Second
	throttleDefaultMinSent = 20
)

// Enabled reports whether the throttle is on (K > 0).
func (p ThrottlePolicy) Enabled() bool { return p.K > 0 }

// normalized writes out the "0 means" defaults of an enabled throttle.
func (p ThrottlePolicy) normalized() ThrottlePolicy {
	if !p.Enabled() {
		return ThrottlePolicy{}
	}
	if p.Window == 0 {
		p.Window = throttleDefaultWindow
	}
	if p.MinSent == 0 {
		p.MinSent = throttleDefaultMinSent
	}
	return p
}

// validate returns an error naming the first field that is out of range.
func (p ThrottlePolicy) validate() error {
	switch {
	case math.IsNaN(p.K) || math.IsInf(p.K, 0) || p.K < 0 || p.K > 0 && p.K < 1:
		return throttleFieldError("K", "must be at least 1, or 0 to turn the throttle off (got "+strconv.FormatFloat(p.K, 'g', -1, 64)+")")
	case p.K == 0 && p != ThrottlePolicy{}:
		return throttleFieldError("K", "must be set when another Throttle field is (0 turns the throttle off)")
	case p.Window < 0 || p.Window > 0 && p.Window < throttleBuckets*time.Millisecond:
		return throttleFieldError("Window", "must be at least 8ms, or 0 for 1s (got "+p.Window.String()+")")
	case p.MinSent < 0:
		return throttleFieldError("MinSent", "must not be negative (got "+strconv.Itoa(p.MinSent)+")")
	}
	return nil
}

func throttleFieldError(field, msg string) error {
	return &PolicyError{Field: "Throttle." + field, Reason: msg}
}

// ErrThrottled is what errors.Is finds in every refusal of a Throttle.
var ErrThrottled = errors.New("admission: throttled")

// ErrRefused is what errors.Is finds in every refusal of admission control: a
// *LimitError (also ErrOverLimit) and a *ThrottleError (also ErrThrottled). The call
// was not made, and the destination is up: come back after the error's NotBefore.
var ErrRefused = errors.New("admission: refused")

// ThrottleError is a Throttle's refusal of a call. errors.Is(err, ErrThrottled) holds
// for it. A throttle hands out one ThrottleError per bucket of its window, so refusing
// allocates at most once per Window/8; treat it as read-only.
type ThrottleError struct {
	// NotBefore is when the throttle next revises its probability (the end of the
	// current bucket): a retry before then is refused with the same probability, one
	// after it is judged on newer evidence.
	NotBefore time.Time
	// RejectProbability is the probability the call was refused with.
	RejectProbability float64

	bucket int64 // the bucket the refusal was made in
}

// Error says that the call was throttled, with what probability, and when to come back.
func (e *ThrottleError) Error() string {
	return "admission: throttled (reject probability " + strconv.FormatFloat(e.RejectProbability, 'f', 2, 64) +
		", retry after " + e.NotBefore.UTC().Format(time.RFC3339Nano) + ")"
}

// Is reports whether target is ErrThrottled or ErrRefused.
func (e *ThrottleError) Is(target error) bool { return target == ErrThrottled || target == ErrRefused }

// ThrottleStats is what a Throttle shows the surfaces (admin, CLI, metrics).
type ThrottleStats struct {
	// RejectProbability is the probability a call is refused with now.
	RejectProbability float64
	// Sent and Accepted are the calls sent with a verdict, and the accepted ones
	// among them, in the trailing window.
	Sent, Accepted int64
	// Refused counts the calls the throttle refused since it was made.
	Refused uint64
}

// Throttle refuses calls to a destination in proportion to how little of what is
// sent it accepts (ThrottlePolicy says how). It is fed by the result of every call it
// admitted: Record(true) for a call the destination accepted; Record(false) for one
// it answered with a failure or that was dropped without an answer (a timeout, a
// deadline that the call started with enough budget for); nothing at all for a call
// that says nothing about the destination (the caller gave up, the message itself
// was refused, a deadline too short to be a verdict), nor for a call that was never
// sent. Admission counts nothing: a call that is admitted and then not sent leaves
// no trace.
//
// Admit is lock-free and allocation-free, and while the reject probability is 0 it
// reads one atomic and no clock. The probability is revised from the window at most
// once per bucket (Window/8), by the first Record (or, while refusing, the first
// Admit) of a new bucket; between revisions it is a single atomic word. Record reads
// the clock and adds to one of several cache-line-sized stripes of counters (twice
// GOMAXPROCS, rounded up to a power of two, at most 16), picked by a hash of the clock
// reading, so that completions on different cores rarely write the same line. The
// draws that decide refusals come from math/rand/v2's per-thread generator.
//
// A nil *Throttle is off: it admits every call and records nothing. A Throttle is
// safe for concurrent use.
type Throttle struct {
	// Read by every admission; written at most once per bucket.
	threshold atomic.Uint64 // refuse when a uniform 64-bit draw is below it; 0: refuse nothing
	revised   atomic.Int64  // the bucket the threshold was last revised in
	refusal   atomic.Pointer[ThrottleError]
	accepting atomic.Bool // the last revision found the destination accepting (Accepting)

	p       ThrottlePolicy
	width   int64 // nanoseconds of a bucket
	clock   func() time.Time
	epoch   time.Time
	shift   uint             // 64 - log2(len(stripes))
	stripes []throttleStripe // written by completions and refusals
	rnd     func() uint64    // nil: rand.Uint64 (tests make the draws repeatable)
}

// throttleBuckets is how many buckets a window holds; a stripe keeps one counter word
// per bucket, so that the words of one stripe fill one cache line.
const throttleBuckets = 8

// A counter word packs a bucket's tag (its index modulo 2^28) with its sent and
// accepted counts (18 bits each, up to 262,143 calls a stripe a bucket). Tagging the
// word lets a completion start a new bucket with one compare-and-swap, with no
// separate rotation to race with. A word left untouched for a multiple of 2^28
// buckets (a year at the default window, 3 days at the smallest) would pass for
// current once: a window's worth of stale evidence, no more.
const (
	throttleCountBits = 18
	throttleCountMask = 1<<throttleCountBits - 1
	throttleTagShift  = 2 * throttleCountBits
	throttleTagMask   = 1<<(64-throttleTagShift) - 1
	throttleMaxStripe = 16
)

// stripes is how many stripes of counters a Throttle or a Limiter's window keeps:
// twice GOMAXPROCS, rounded up to a power of two, at most throttleMaxStripe.
func stripes() int {
	return min(1<<bits.Len(uint(2*runtime.GOMAXPROCS(0)-1)), throttleMaxStripe)
}

// throttleStripe is 128 bytes: a slice of them is 64-byte aligned (its size class is
// a power of two of at least 128), so no two stripes share a cache line.
type throttleStripe struct {
	words   [throttleBuckets]atomic.Uint64
	refused atomic.Uint64
	_       [56]byte
}

// NewThrottle returns a throttle with policy p, or nil (which admits everything) when
// p turns it off. It reads time from now (nil: the time elapsed since NewThrottle, on
// the monotonic clock). A policy out of range is an error naming the field.
func NewThrottle(p ThrottlePolicy, now func() time.Time) (*Throttle, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	if !p.Enabled() {
		return nil, nil
	}
	epoch := time.Now()
	if now != nil {
		epoch = now()
	}
	return newThrottle(p, now, epoch), nil
}

// newThrottle makes an enabled throttle counting time from epoch, so that an
// admission controller can share its epoch and hand the throttle its own clock
// readings (recordAt, admitAt).
func newThrottle(p ThrottlePolicy, now func() time.Time, epoch time.Time) *Throttle {
	p = p.normalized()
	n := stripes()
	return &Throttle{
		p:       p,
		width:   int64(p.Window / throttleBuckets),
		clock:   now,
		epoch:   epoch,
		stripes: make([]throttleStripe, n),
		shift:   uint(64 - bits.TrailingZeros(uint(n))),
	}
}

// Policy returns the throttle's policy with defaults written out.
func (t *Throttle) Policy() ThrottlePolicy {
	if t == nil {
		return ThrottlePolicy{}
	}
	return t.p
}

func (t *Throttle) now() int64 {
	if t.clock == nil {
		return max(int64(time.Since(t.epoch)), 0)
	}
	return max(int64(t.clock().Sub(t.epoch)), 0)
}

func (t *Throttle) draw() uint64 {
	if t.rnd != nil {
		return t.rnd()
	}
	return rand.Uint64()
}

// stripe picks the stripe a call at now writes to, by a Fibonacci hash of the clock
// reading: readings on different cores differ in their low bits, and hashing costs
// less than a random draw. (A fake clock that stands still sends every write to one
// stripe: correct, only contended.)
func (t *Throttle) stripe(now int64) *throttleStripe {
	return &t.stripes[uint64(now)*0x9E3779B97F4A7C15>>t.shift]
}

// Admit decides whether a call may be sent: nil, or a *ThrottleError. While the
// reject probability is 0 it reads one atomic and nothing else.
func (t *Throttle) Admit() error {
	if t == nil || t.threshold.Load() == 0 {
		return nil
	}
	return t.admitNow()
}

// admitNow is Admit's path while refusing, out of line so that Admit inlines.
func (t *Throttle) admitNow() error { return t.admitAt(t.now()) }

// admitAt decides at now (nanoseconds since the epoch), revising the probability
// first when the bucket has moved on since the last revision.
func (t *Throttle) admitAt(now int64) error {
	b := now / t.width
	if b > t.revised.Load() {
		t.revise(b)
	}
	thr := t.threshold.Load()
	if thr == 0 || t.draw() >= thr {
		return nil
	}
	t.stripe(now).refused.Add(1)
	return t.refuse(b, thr)
}

// refuse returns the refusal for bucket b at threshold thr: the cached one when it was
// made in the same bucket at the same probability.
func (t *Throttle) refuse(b int64, thr uint64) *ThrottleError {
	p := throttleProbability(thr)
	if e := t.refusal.Load(); e != nil && e.bucket == b && e.RejectProbability == p {
		return e
	}
	e := &ThrottleError{NotBefore: t.epoch.Add(time.Duration((b + 1) * t.width)), RejectProbability: p, bucket: b}
	t.refusal.Store(e)
	return e
}

// Record feeds the throttle the verdict on a call it admitted and that was sent:
// accepted true for a success; false for a failure answer or a call dropped without
// an answer. Do not record calls that say nothing about the destination. It reads the
// clock.
func (t *Throttle) Record(accepted bool) {
	if t == nil {
		return
	}
	t.recordAt(t.now(), accepted)
}

func (t *Throttle) recordAt(now int64, accepted bool) {
	b := now / t.width
	tag := uint64(b) & throttleTagMask
	add := uint64(1)
	if accepted {
		add |= 1 << throttleCountBits
	}
	w := &t.stripe(now).words[b%throttleBuckets]
	for {
		old := w.Load()
		next := tag<<throttleTagShift | add
		if old>>throttleTagShift == tag {
			if old&throttleCountMask == throttleCountMask {
				break // the stripe's bucket is full: drop the sample rather than wrap
			}
			next = old + add
		}
		if w.CompareAndSwap(old, next) {
			break
		}
	}
	if b > t.revised.Load() {
		t.revise(b)
	}
}

// window sums the sent and accepted calls of the buckets in the window that ends with
// bucket b (b included).
func (t *Throttle) window(b int64) (sent, accepted int64) {
	w := t.buckets(b)
	return w.sent, w.accepted
}

// windowCounts are a window's sums, and those of its last complete bucket.
type windowCounts struct {
	sent, accepted         int64
	lastSent, lastAccepted int64 // bucket b-1
}

func (t *Throttle) buckets(b int64) windowCounts {
	var w windowCounts
	for i := range t.stripes {
		s := &t.stripes[i]
		for j := range s.words {
			v := s.words[j].Load()
			age := (uint64(b) - v>>throttleTagShift) & throttleTagMask
			if age >= throttleBuckets {
				continue
			}
			sent, accepted := int64(v&throttleCountMask), int64(v>>throttleCountBits&throttleCountMask)
			w.sent += sent
			w.accepted += accepted
			if age == 1 {
				w.lastSent += sent
				w.lastAccepted += accepted
			}
		}
	}
	return w
}

// revise recomputes the reject probability for bucket b, once per bucket: the caller
// that moves revised to b does it, the others go on with the probability in force.
func (t *Throttle) revise(b int64) {
	last := t.revised.Load()
	if b <= last || !t.revised.CompareAndSwap(last, b) {
		return
	}
	w := t.buckets(b)
	sent, accepted := w.sent, w.accepted
	// Accepting: a useful share over the window, and not a full last bucket of
	// nothing accepted (a destination that has just gone down, whose healthy calls
	// are still in the window).
	ok := sent >= int64(t.p.MinSent) && throttleAcceptingShare*accepted >= sent &&
		(w.lastSent < int64(t.p.MinSent) || w.lastAccepted > 0)
	if ok != t.accepting.Load() {
		t.accepting.Store(ok)
	}
	p := 0.0
	if sent >= int64(t.p.MinSent) || sent > 0 && t.threshold.Load() != 0 {
		p = max(0, (float64(sent)-t.p.K*float64(accepted))/float64(sent+1))
	}
	t.threshold.Store(throttleThreshold(p))
}

// Recovered tells the throttle that its destination's circuit closed after an outage
// (a probe succeeded): the failures in the window are of the outage that is over, so
// it forgets them and refuses nothing until new evidence says otherwise. Without it,
// the outage's last failed calls would refuse a share of the first calls after the
// return, for up to a bucket. A registry calls it when the circuit's probe succeeds.
func (t *Throttle) Recovered() {
	if t == nil {
		return
	}
	for i := range t.stripes {
		for j := range t.stripes[i].words {
			t.stripes[i].words[j].Store(0) // a record racing with this is lost, no more
		}
	}
	t.threshold.Store(0)
	t.accepting.Store(false)
}

// throttleAcceptingShare: a destination accepting fewer than 1 in this many sent calls
// is not Accepting.
const throttleAcceptingShare = 20

// Accepting reports whether the destination accepts a useful share of what is sent:
// the trailing window holds at least MinSent sent calls, and it accepted at least 1 in
// 20 of them, and the last complete bucket (Window/8) is not one of MinSent or more
// sent calls of which none was accepted: a destination that has just gone down is
// seen within a bucket or two, not when its healthy calls have left the window. (A
// brownout accepting 40 % has all MinSent calls of a bucket refused with probability
// 0.6^20, about 4 in 100,000.) It reads the clock and revises the window when its bucket has moved on,
// so that evidence older than the window never counts.
//
// A registry asks it before it holds a failure against the destination's circuit:
// while the destination accepts a share, the throttle sheds in proportion and the
// circuit stays closed (a brownout keeps the goodput the destination gives); a
// destination that accepts (almost) nothing, or whose traffic is too rare to fill
// the window, is judged by its circuit alone.
func (t *Throttle) Accepting() bool {
	if t == nil {
		return false
	}
	if b := t.now() / t.width; b > t.revised.Load() {
		t.revise(b)
	}
	return t.accepting.Load()
}

// throttleThreshold turns a probability in [0, 1) into the bound a uniform 64-bit draw
// is refused below.
func throttleThreshold(p float64) uint64 {
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return math.MaxUint64
	}
	return uint64(p * (1 << 64))
}

func throttleProbability(thr uint64) float64 { return float64(thr) / (1 << 64) }

// Stats returns the probability in force, the window's counts and the refusals so far.
// It reads the clock and revises the probability when its bucket has moved on.
func (t *Throttle) Stats() ThrottleStats {
	if t == nil {
		return ThrottleStats{}
	}
	b := t.now() / t.width
	if b > t.revised.Load() {
		t.revise(b)
	}
	var s ThrottleStats
	s.Sent, s.Accepted = t.window(b)
	s.RejectProbability = throttleProbability(t.threshold.Load())
	for i := range t.stripes {
		s.Refused += t.stripes[i].refused.Load()
	}
	return s
}
