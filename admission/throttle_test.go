package admission

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var throttleBase = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)

// throttleClock is a fake clock that counts its reads.
type throttleClock struct {
	at    atomic.Int64 // nanoseconds after throttleBase
	reads atomic.Int64
}

func (c *throttleClock) now() time.Time {
	c.reads.Add(1)
	return throttleBase.Add(time.Duration(c.at.Load()))
}

func (c *throttleClock) set(d time.Duration) { c.at.Store(int64(d)) }

// newClockedThrottle returns a throttle with policy p on a fake clock at throttleBase.
func newClockedThrottle(t *testing.T, p ThrottlePolicy) (*Throttle, *throttleClock) {
	t.Helper()
	c := &throttleClock{}
	th, err := NewThrottle(p, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if th == nil {
		t.Fatalf("NewThrottle(%+v) = nil, want a throttle", p)
	}
	return th, c
}

// recordN records n calls, the first accepted of which were accepted.
func recordN(th *Throttle, n, accepted int) {
	for i := range n {
		th.Record(i < accepted)
	}
}

func TestThrottlePolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     ThrottlePolicy
		field string // "" when valid
	}{
		{"zero is off", ThrottlePolicy{}, ""},
		{"default", DefaultThrottlePolicy(), ""},
		{"K alone", ThrottlePolicy{K: 1}, ""},
		{"smallest window", ThrottlePolicy{K: 2, Window: 8 * time.Millisecond}, ""},
		{"K below 1", ThrottlePolicy{K: 0.5}, "K"},
		{"K negative", ThrottlePolicy{K: -3}, "K"},
		{"K NaN", ThrottlePolicy{K: math.NaN()}, "K"},
		{"K infinite", ThrottlePolicy{K: math.Inf(1)}, "K"},
		{"window without K", ThrottlePolicy{Window: time.Second}, "K"},
		{"min sent without K", ThrottlePolicy{MinSent: 5}, "K"},
		{"window under a millisecond a bucket", ThrottlePolicy{K: 3, Window: 7 * time.Millisecond}, "Window"},
		{"window negative", ThrottlePolicy{K: 3, Window: -time.Second}, "Window"},
		{"min sent negative", ThrottlePolicy{K: 3, MinSent: -1}, "MinSent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th, err := NewThrottle(tc.p, nil)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("NewThrottle(%+v) = %v, want no error", tc.p, err)
				}
				if (th != nil) != tc.p.Enabled() {
					t.Fatalf("NewThrottle(%+v) = %v, want a throttle only when enabled", tc.p, th)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "Throttle."+tc.field+" ") {
				t.Fatalf("NewThrottle(%+v) = %v, want an error naming Throttle.%s", tc.p, err, tc.field)
			}
			if th != nil {
				t.Fatalf("NewThrottle(%+v) returned a throttle with its error", tc.p)
			}
		})
	}
}

func TestThrottlePolicyNormalized(t *testing.T) {
	for _, tc := range []struct {
		in, want ThrottlePolicy
	}{
		{ThrottlePolicy{}, ThrottlePolicy{}},
		{ThrottlePolicy{K: 2}, ThrottlePolicy{K: 2, Window: time.Second, MinSent: 20}},
		{ThrottlePolicy{K: 4, Window: 80 * time.Millisecond, MinSent: 1}, ThrottlePolicy{K: 4, Window: 80 * time.Millisecond, MinSent: 1}},
		{DefaultThrottlePolicy(), ThrottlePolicy{K: 3, Window: time.Second, MinSent: 20}},
	} {
		if got := tc.in.normalized(); got != tc.want {
			t.Errorf("%+v.normalized() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	th, _ := newClockedThrottle(t, ThrottlePolicy{K: 2})
	if got, want := th.Policy(), (ThrottlePolicy{K: 2, Window: time.Second, MinSent: 20}); got != want {
		t.Errorf("Policy() = %+v, want %+v", got, want)
	}
}

func TestThrottleZeroValueIsOff(t *testing.T) {
	th, err := NewThrottle(ThrottlePolicy{}, nil)
	if th != nil || err != nil {
		t.Fatalf("NewThrottle(zero) = %v, %v; want nil, nil", th, err)
	}
	for range 100 {
		th.Record(false)
		if err := th.Admit(); err != nil {
			t.Fatalf("a nil throttle refused: %v", err)
		}
	}
	if s := th.Stats(); s != (ThrottleStats{}) {
		t.Fatalf("a nil throttle's Stats = %+v, want zero", s)
	}
	if p := th.Policy(); p != (ThrottlePolicy{}) {
		t.Fatalf("a nil throttle's Policy = %+v, want zero", p)
	}
}

// TestThrottleProbability checks the rule on windows of one bucket of evidence: the
// probability is max(0, (sent - K*accepted) / (sent + 1)) from MinSent sent calls on.
func TestThrottleProbability(t *testing.T) {
	for _, tc := range []struct {
		name             string
		p                ThrottlePolicy
		sent, accepted   int
		wantProbability  float64
		wantWindowCounts bool
	}{
		{"below the minimum sample", ThrottlePolicy{K: 3}, 19, 0, 0, true},
		{"at the minimum sample", ThrottlePolicy{K: 3}, 20, 0, 20.0 / 21, true},
		{"a smaller minimum", ThrottlePolicy{K: 3, MinSent: 3}, 3, 0, 3.0 / 4, true},
		{"accepting a tenth", ThrottlePolicy{K: 3}, 100, 10, 70.0 / 101, true},
		{"accepting a hundredth", ThrottlePolicy{K: 3}, 1000, 10, 970.0 / 1001, true},
		{"accepting exactly 1/K", ThrottlePolicy{K: 3}, 90, 30, 0, true},
		{"accepting 40 %", ThrottlePolicy{K: 3}, 100, 40, 0, true},
		{"K 2 at 40 %", ThrottlePolicy{K: 2}, 100, 40, 20.0 / 101, true},
		{"K 1 judges every failure", ThrottlePolicy{K: 1}, 100, 90, 10.0 / 101, true},
		{"all accepted", ThrottlePolicy{K: 1}, 100, 100, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th, c := newClockedThrottle(t, tc.p)
			recordN(th, tc.sent, tc.accepted)
			if err := th.Admit(); err != nil {
				t.Fatalf("refused before the bucket ended: %v", err)
			}
			c.set(th.p.Window / throttleBuckets) // the next bucket: the probability is revised
			s := th.Stats()
			if math.Abs(s.RejectProbability-tc.wantProbability) > 1e-12 {
				t.Errorf("RejectProbability = %v, want %v", s.RejectProbability, tc.wantProbability)
			}
			if s.Sent != int64(tc.sent) || s.Accepted != int64(tc.accepted) {
				t.Errorf("window holds %d sent, %d accepted; want %d, %d", s.Sent, s.Accepted, tc.sent, tc.accepted)
			}
		})
	}
}

// TestThrottleKeepsJudgingOnceRefusing: the minimum sample starts the throttle; once it
// refuses it judges by what the window holds until the probability is back to 0, and
// then the minimum applies again.
func TestThrottleKeepsJudgingOnceRefusing(t *testing.T) {
	th, c := newClockedThrottle(t, ThrottlePolicy{K: 3})
	bucket := th.p.Window / throttleBuckets
	steps := []struct {
		at       time.Duration
		failures int
		want     float64
	}{
		// A record that starts a bucket revises the probability before the records
		// after it in that bucket; Stats revises when its bucket is newer.
		{0, 40, 0},                  // bucket 0: nothing revised yet
		{1 * bucket, 0, 40.0 / 41},  // engaged on 40 sent
		{7 * bucket, 3, 41.0 / 42},  // bucket 0 still in the window
		{9 * bucket, 0, 3.0 / 4},    // only bucket 7's 3 left: still judged
		{16 * bucket, 0, 0},         // nothing left: off
		{17 * bucket, 3, 0},         // 1 sent when revised
		{18 * bucket, 0, 0},         // 3 sent < MinSent: stays off
		{19 * bucket, 17, 0},        // 4 sent when revised
		{20 * bucket, 0, 20.0 / 21}, // 20 sent: engaged again
		{28 * bucket, 0, 0},         // window empty
		{29 * bucket, 2, 0},         // off, and 2 failures do not engage it
		{30 * bucket, 0, 0},
	}
	for _, st := range steps {
		c.set(st.at)
		recordN(th, st.failures, 0)
		if got := th.Stats().RejectProbability; math.Abs(got-st.want) > 1e-12 {
			t.Fatalf("at %v: RejectProbability = %v, want %v", st.at, got, st.want)
		}
	}
}

// TestThrottleWindowExpiry: evidence counts for the 8 buckets of the window and then
// drops out, also when nothing is recorded (an admission revises while refusing).
func TestThrottleWindowExpiry(t *testing.T) {
	th, c := newClockedThrottle(t, ThrottlePolicy{K: 3, Window: 800 * time.Millisecond})
	th.rnd = func() uint64 { return math.MaxUint64 } // admit every call: no refusal is drawn
	recordN(th, 50, 0)
	c.set(100 * time.Millisecond)
	if s := th.Stats(); s.RejectProbability != 50.0/51 {
		t.Fatalf("probability %v after 50 failures, want %v", s.RejectProbability, 50.0/51)
	}
	for _, tc := range []struct {
		at       time.Duration
		wantSent int64
		wantP    float64
	}{
		{799 * time.Millisecond, 50, 50.0 / 51}, // bucket 7: bucket 0 still in
		{800 * time.Millisecond, 0, 0},          // bucket 8: out
	} {
		c.set(tc.at)
		if err := th.Admit(); err != nil {
			t.Fatalf("at %v: refused with the draw at its maximum: %v", tc.at, err)
		}
		if got := throttleProbability(th.threshold.Load()); math.Abs(got-tc.wantP) > 1e-12 {
			t.Errorf("at %v: after Admit the probability is %v, want %v", tc.at, got, tc.wantP)
		}
		if s := th.Stats(); s.Sent != tc.wantSent {
			t.Errorf("at %v: window holds %d sent, want %d", tc.at, s.Sent, tc.wantSent)
		}
	}
}

// TestThrottleAccepting checks the view the circuit's judge reads: a destination is
// accepting while the window holds MinSent sent calls of which 1 in 20 or more were
// accepted; too few calls, or evidence that has left the window, say nothing. (The
// records are made in bucket 0 and judged from the next bucket on, when the window is
// revised.)
func TestThrottleAccepting(t *testing.T) {
	const bucket = time.Second / 8 // the default window's
	for _, tc := range []struct {
		name           string
		sent, accepted int
		later          time.Duration // when Accepting is asked, after the records
		want           bool
	}{
		{"healthy", 100, 100, bucket, true},
		{"60 % failing", 100, 40, bucket, true},
		{"1 in 20 accepted", 100, 5, bucket, true},
		{"fewer than 1 in 20", 100, 4, bucket, false},
		{"nothing accepted", 100, 0, bucket, false},
		{"too few calls sent", 19, 19, bucket, false},
		{"MinSent sent", 20, 20, bucket, true},
		{"evidence out of the window", 100, 100, 8 * bucket, false},
		{"evidence still in the window", 100, 100, 7*bucket + bucket - 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th, c := newClockedThrottle(t, DefaultThrottlePolicy())
			recordN(th, tc.sent, tc.accepted)
			c.set(tc.later)
			if got := th.Accepting(); got != tc.want {
				t.Fatalf("Accepting() = %v after %d sent, %d accepted, asked %v later; want %v", got, tc.sent, tc.accepted, tc.later, tc.want)
			}
		})
	}
	if (*Throttle)(nil).Accepting() {
		t.Fatal("a nil throttle says its destination accepts")
	}
	// A destination that has just gone down: a healthy bucket, then a bucket of
	// MinSent failures. Over the window it accepted half, yet it is not accepting
	// from the next bucket on; with one call accepted in that bucket, it still is.
	for _, tc := range []struct {
		accepted int
		want     bool
	}{{0, false}, {1, true}} {
		th, c := newClockedThrottle(t, DefaultThrottlePolicy())
		recordN(th, 20, 20)
		c.set(bucket)
		recordN(th, 20, tc.accepted)
		c.set(2 * bucket)
		if got := th.Accepting(); got != tc.want {
			t.Errorf("a healthy bucket, then one of 20 calls with %d accepted: Accepting() = %v, want %v", tc.accepted, got, tc.want)
		}
	}
}

// TestThrottleRefusal checks the refusal's values: one error per bucket, errors.Is
// ErrThrottled, NotBefore at the next revision, the probability it was drawn against,
// and no allocation for repeated refusals.
func TestThrottleRefusal(t *testing.T) {
	th, c := newClockedThrottle(t, ThrottlePolicy{K: 3})
	var draw uint64 // 0 refuses whenever the probability is above 0
	th.rnd = func() uint64 { return draw }
	recordN(th, 100, 10)
	c.set(130 * time.Millisecond) // bucket 1 of 125ms: Stats revises (Admit at probability 0 would not look)
	_ = th.Stats()
	err := th.Admit()
	var te *ThrottleError
	if !errors.As(err, &te) || !errors.Is(err, ErrThrottled) || !errors.Is(err, ErrRefused) || errors.Is(err, ErrOverLimit) {
		t.Fatalf("Admit = %v, want a *ThrottleError that is ErrThrottled and ErrRefused, not ErrOverLimit", err)
	}
	if want := throttleBase.Add(250 * time.Millisecond); !te.NotBefore.Equal(want) {
		t.Errorf("NotBefore = %v, want %v (the end of the bucket)", te.NotBefore, want)
	}
	if want := 70.0 / 101; math.Abs(te.RejectProbability-want) > 1e-12 {
		t.Errorf("RejectProbability = %v, want %v", te.RejectProbability, want)
	}
	for _, s := range []string{"admission: throttled", "reject probability 0.69", "retry after 2026-12-03T09:00:00.25Z"} {
		if !strings.Contains(te.Error(), s) {
			t.Errorf("Error() = %q, want it to say %q", te.Error(), s)
		}
	}
	if again := th.Admit(); again != err {
		t.Errorf("a second refusal in the bucket is %p, want the same error %p", again, err)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = th.Admit() }); allocs != 0 {
		t.Errorf("a refusal allocates %v times, want 0", allocs)
	}
	draw = math.MaxUint64
	if err := th.Admit(); err != nil {
		t.Errorf("a draw above the probability was refused: %v", err)
	}
	draw = 0
	c.set(260 * time.Millisecond) // bucket 2: a new refusal, NotBefore moves on
	next := th.Admit()
	if !errors.As(next, &te) || next == err || !te.NotBefore.Equal(throttleBase.Add(375*time.Millisecond)) {
		t.Errorf("the next bucket's refusal = %v, want a new error with NotBefore 375ms on", next)
	}
	if got := th.Stats().Refused; got != 104 { // 2 + 101 (AllocsPerRun's runs and warm-up) + 1
		t.Errorf("Refused = %d, want 104", got)
	}
}

// TestThrottleIgnoredResultsChangeNothing: admission counts nothing, so calls that are
// admitted and never recorded (ignored, or never sent) leave the window and the
// probability as they were.
func TestThrottleIgnoredResultsChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name             string
		sent, accepted   int
		wantP            float64
		admitsEachBucket int
	}{
		{"while not refusing", 30, 15, 0, 1000},
		{"while refusing", 30, 0, 30.0 / 31, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th, c := newClockedThrottle(t, ThrottlePolicy{K: 3})
			th.rnd = func() uint64 { return math.MaxUint64 }
			recordN(th, tc.sent, tc.accepted)
			for b := range time.Duration(8) {
				c.set(b * 125 * time.Millisecond)
				for range tc.admitsEachBucket {
					if err := th.Admit(); err != nil {
						t.Fatal(err)
					}
				}
				s := th.Stats()
				if s.Sent != int64(tc.sent) || s.Accepted != int64(tc.accepted) {
					t.Fatalf("bucket %d: window %d sent, %d accepted; want %d, %d", b, s.Sent, s.Accepted, tc.sent, tc.accepted)
				}
				if b > 0 && math.Abs(s.RejectProbability-tc.wantP) > 1e-12 {
					t.Fatalf("bucket %d: probability %v, want %v", b, s.RejectProbability, tc.wantP)
				}
			}
		})
	}
}

// TestThrottleHotPath: while the probability is 0 admission reads no clock; neither
// admission nor recording allocates.
func TestThrottleHotPath(t *testing.T) {
	th, c := newClockedThrottle(t, DefaultThrottlePolicy())
	before := c.reads.Load()
	for range 1000 {
		if err := th.Admit(); err != nil {
			t.Fatal(err)
		}
	}
	if reads := c.reads.Load() - before; reads != 0 {
		t.Errorf("1000 admissions at probability 0 read the clock %d times, want 0", reads)
	}
	if allocs := testing.AllocsPerRun(1000, func() {
		if th.Admit() == nil {
			th.Record(true)
		}
	}); allocs != 0 {
		t.Errorf("Admit+Record allocates %v times, want 0", allocs)
	}
	c.set(2 * time.Second) // past the window of the successes above
	recordN(th, 100, 0)
	c.set(2*time.Second + 125*time.Millisecond)
	if p := th.Stats().RejectProbability; p == 0 {
		t.Fatal("100 failures did not engage the throttle")
	}
	th.rnd = func() uint64 { return math.MaxUint64 }
	before = c.reads.Load()
	_ = th.Admit()
	if reads := c.reads.Load() - before; reads != 1 {
		t.Errorf("an admission while refusing read the clock %d times, want 1", reads)
	}
}

// TestThrottleConcurrentUse: records from many goroutines all land in the window, with
// admissions and Stats racing them.
func TestThrottleConcurrentUse(t *testing.T) {
	th, _ := newClockedThrottle(t, ThrottlePolicy{K: 3, MinSent: 1})
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_ = th.Admit()
				th.Record((w+i)%2 == 0)
				if i%500 == 0 {
					_ = th.Stats()
				}
			}
		})
	}
	wg.Wait()
	if s := th.Stats(); s.Sent != workers*each || s.Accepted != workers*each/2 {
		t.Fatalf("window holds %d sent, %d accepted; want %d, %d", s.Sent, s.Accepted, workers*each, workers*each/2)
	}
}

// TestThrottleFullBucketDoesNotWrap: a stripe's bucket that reaches its counters'
// capacity drops further samples instead of carrying into the bucket's tag.
func TestThrottleFullBucketDoesNotWrap(t *testing.T) {
	th, _ := newClockedThrottle(t, ThrottlePolicy{K: 3}) // the clock stands still: one stripe takes every record
	recordN(th, throttleCountMask+10, throttleCountMask+10)
	if s := th.Stats(); s.Sent != throttleCountMask || s.Accepted != throttleCountMask {
		t.Fatalf("window holds %d sent, %d accepted; want both %d", s.Sent, s.Accepted, throttleCountMask)
	}
}

// The closed-loop model: simulated callers, a simulated destination and a fake
// clock, run once with a throttle and once without, on the same schedule. Each caller
// thinks, then calls; a sent call comes back after the destination's latency, a
// refused one at once, and either way the caller thinks again and makes its next
// call (a refused message is not retried). Goodput is the calls the destination
// accepted.

// throttleDestination decides a call sent at a time.
type throttleDestination func(at time.Duration, r *rand.Rand) bool

// throttleRandomFailures fails a share of the calls sent within [from, to) at random.
func throttleRandomFailures(share float64, from, to time.Duration) throttleDestination {
	return throttleFailing(func(at time.Duration) float64 {
		if at < from || at >= to {
			return 0
		}
		return share
	})
}

// throttleFailing fails the share of the calls that share(at) says, at random.
func throttleFailing(share func(at time.Duration) float64) throttleDestination {
	return func(at time.Duration, r *rand.Rand) bool { return r.Float64() >= share(at) }
}

// throttleDownDuring accepts nothing while down(at) and everything otherwise.
func throttleDownDuring(down func(at time.Duration) bool) throttleDestination {
	return func(at time.Duration, _ *rand.Rand) bool { return !down(at) }
}

// throttleCapacity accepts up to perSecond calls a second (a token bucket holding a
// tenth of a second's worth) within [from, to), and fails the rest.
func throttleCapacity(perSecond float64, from, to time.Duration) throttleDestination {
	tokens, last := perSecond/10, time.Duration(0)
	return func(at time.Duration, _ *rand.Rand) bool {
		tokens = min(tokens+perSecond*(at-last).Seconds(), perSecond/10)
		last = at
		if at < from || at >= to {
			return true
		}
		if tokens >= 1 {
			tokens--
			return true
		}
		return false
	}
}

type throttleModel struct {
	callers     int
	think       time.Duration
	okLatency   time.Duration
	failLatency time.Duration
	length      time.Duration
	// countRefused records every refusal as a call sent and not accepted: the SRE
	// book's count of requests, for comparison.
	countRefused bool
}

// throttleSecond is one row of a run's schedule.
type throttleSecond struct {
	sent, accepted, refused int
	p                       float64 // the reject probability in force at the end of the second
}

type throttleRun struct {
	rows     []throttleSecond
	refusals []time.Duration // when calls were refused, in order
}

type throttleEvent struct {
	at       time.Duration
	caller   int
	done     bool // a sent call comes back (else: the caller calls)
	accepted bool
}

type throttleEvents []throttleEvent

func (q throttleEvents) Len() int { return len(q) }
func (q throttleEvents) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].caller < q[j].caller
}
func (q throttleEvents) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *throttleEvents) Push(x any)   { *q = append(*q, x.(throttleEvent)) }
func (q *throttleEvents) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// run plays the model against dest with policy p (the zero policy: no throttle).
// The same seed gives the same run.
func (m throttleModel) run(t *testing.T, p ThrottlePolicy, dest throttleDestination, seed uint64) throttleRun {
	t.Helper()
	var at time.Duration
	th, err := NewThrottle(p, func() time.Time { return throttleBase.Add(at) })
	if err != nil {
		t.Fatal(err)
	}
	destRand := rand.New(rand.NewPCG(seed, 1))
	if th != nil {
		th.rnd = rand.New(rand.NewPCG(seed, 2)).Uint64
	}
	run := throttleRun{rows: make([]throttleSecond, int(m.length/time.Second))}
	q := make(throttleEvents, 0, m.callers)
	for i := range m.callers {
		q = append(q, throttleEvent{at: m.think * time.Duration(i) / time.Duration(m.callers), caller: i})
	}
	heap.Init(&q)
	sec := 0
	for q.Len() > 0 {
		e := q[0] // each caller has one event queued: its next one replaces it
		if e.at >= m.length {
			break
		}
		for ; time.Duration(sec+1)*time.Second <= e.at; sec++ {
			if th != nil {
				run.rows[sec].p = throttleProbability(th.threshold.Load())
			}
		}
		at = e.at
		row := &run.rows[sec]
		if e.done {
			if e.accepted {
				row.accepted++
			}
			th.Record(e.accepted)
			q[0] = throttleEvent{at: at + m.think, caller: e.caller}
			heap.Fix(&q, 0)
			continue
		}
		if err := th.Admit(); err != nil {
			row.refused++
			run.refusals = append(run.refusals, at)
			if m.countRefused {
				th.Record(false)
			}
			q[0] = throttleEvent{at: at + m.think, caller: e.caller}
			heap.Fix(&q, 0)
			continue
		}
		row.sent++
		ok := dest(at, destRand)
		latency := m.failLatency
		if ok {
			latency = m.okLatency
		}
		q[0] = throttleEvent{at: at + latency, caller: e.caller, done: true, accepted: ok}
		heap.Fix(&q, 0)
	}
	if th != nil {
		for ; sec < len(run.rows); sec++ {
			run.rows[sec].p = throttleProbability(th.threshold.Load())
		}
	}
	return run
}

// sum adds up the rows of seconds [from, to).
func (r throttleRun) sum(from, to int) (s throttleSecond) {
	for _, row := range r.rows[from:to] {
		s.sent += row.sent
		s.accepted += row.accepted
		s.refused += row.refused
	}
	return s
}

// meanP is the mean reject probability at the ends of seconds [from, to).
func (r throttleRun) meanP(from, to int) float64 {
	var p float64
	for _, row := range r.rows[from:to] {
		p += row.p
	}
	return p / float64(to-from)
}

// logSchedule prints the schedule of a run (with) beside a run to compare it with
// (none: without a throttle, unless the title says otherwise).
func logSchedule(t *testing.T, title string, none, with throttleRun, phase func(sec int) string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  s  phase       | none: sent accepted | throttle: sent accepted refused    p\n", title)
	for i := range with.rows {
		n, w := none.rows[i], with.rows[i]
		fmt.Fprintf(&b, "%3d  %-10s  | %10d %8d | %14d %8d %7d %5.3f\n", i, phase(i), n.sent, n.accepted, w.sent, w.accepted, w.refused, w.p)
	}
	t.Log(b.String())
}

// throttleStandardModel: 200 callers thinking 10ms, a destination answering in 20ms
// when it accepts and 5ms when it fails (a brownout's failures are fast). Under
// -short it has 50 callers: a window still holds over a thousand calls, and a run
// plays a quarter of the events.
func throttleStandardModel() throttleModel {
	callers := 200
	if testing.Short() {
		callers = 50
	}
	return throttleModel{
		callers:     callers,
		think:       10 * time.Millisecond,
		okLatency:   20 * time.Millisecond,
		failLatency: 5 * time.Millisecond,
	}
}

// requireNeverRefusesEverything fails when, in a second in which the destination
// accepted calls from the run without a throttle, the throttle sent nothing.
func requireNeverRefusesEverything(t *testing.T, none, with throttleRun, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if none.rows[i].accepted > 0 && with.rows[i].sent == 0 {
			t.Errorf("second %d: the throttle refused every call while the destination accepted calls", i)
		}
	}
}

func TestThrottleModelBrownout(t *testing.T) {
	m := throttleStandardModel()
	m.length = 12 * time.Second
	const from, to = 1, 9 // the brownout's seconds; healthy before and after
	phase := func(share float64) func(int) string {
		return func(s int) string {
			if s >= from && s < to {
				return fmt.Sprintf("fail %.0f%%", share*100)
			}
			return "healthy"
		}
	}
	for _, tc := range []struct {
		share      float64
		minGoodput float64 // with/without throttle, accepted calls in the brownout (0: none asked)
		maxLoad    float64 // with/without throttle, calls sent once the window has filled (0: none asked)
	}{
		{0.10, 0.95, 0},
		{0.30, 0.95, 0},
		{0.60, 0.95, 0},
		{0.90, 0, 0.5},
		{0.99, 0, 0.08},
	} {
		t.Run(fmt.Sprintf("%.0f%%", tc.share*100), func(t *testing.T) {
			dest := func() throttleDestination {
				return throttleRandomFailures(tc.share, from*time.Second, to*time.Second)
			}
			none := m.run(t, ThrottlePolicy{}, dest(), 1)
			with := m.run(t, DefaultThrottlePolicy(), dest(), 1)
			logSchedule(t, "brownout", none, with, phase(tc.share))
			n, w := none.sum(from, to), with.sum(from, to)
			goodput := float64(w.accepted) / float64(n.accepted)
			load := float64(w.sent) / float64(n.sent)
			// From the brownout's second second on, the window holds only its evidence.
			steady := float64(with.sum(from+1, to).sent) / float64(none.sum(from+1, to).sent)
			t.Logf("brownout: goodput %.3f x no throttle; load on the destination %.3f x (%.3f x once the window has filled); mean reject probability %.3f",
				goodput, load, steady, with.meanP(from+1, to))
			if goodput < tc.minGoodput {
				t.Errorf("goodput in the brownout is %.3f x no throttle's, want at least %.2f", goodput, tc.minGoodput)
			}
			if tc.maxLoad > 0 && steady > tc.maxLoad {
				t.Errorf("once the window filled, the destination received %.3f x the calls of no throttle, want at most %.2f", steady, tc.maxLoad)
			}
			if after := float64(with.sum(to, len(with.rows)).accepted) / float64(none.sum(to, len(none.rows)).accepted); tc.minGoodput > 0 && after < 0.95 {
				t.Errorf("goodput in the healthy phase after is %.3f x no throttle's, want at least 0.95", after)
			}
			requireRecoveredWithin(t, with, to*time.Second, m.length, throttleRecovery)
			requireNeverRefusesEverything(t, none, with, 0, len(with.rows))
		})
	}
}

// throttleRecovery is "about one window": the default Window and a bucket.
const throttleRecovery = throttleDefaultWindow + throttleDefaultWindow/throttleBuckets

// requireRecoveredWithin logs how long after the destination's return to health at
// back the run refused its last call (looking until the next second in which
// refusals are due again, up to), and fails when that is within or more.
func requireRecoveredWithin(t *testing.T, r throttleRun, back, up, within time.Duration) {
	t.Helper()
	last := time.Duration(-1)
	for _, at := range r.refusals {
		if at >= back && at < up {
			last = at - back
		}
	}
	if last < 0 {
		t.Logf("return to health at %v: no refusal after it", back)
		return
	}
	t.Logf("return to health at %v: last refusal %v after it", back, last)
	if last >= within {
		t.Errorf("the last refusal came %v after the return to health at %v, want within %v", last, back, within)
	}
}

// TestThrottleModelChoosingK runs the brownouts that decide K for a few candidates.
// The default is the smallest K that keeps the goodput of no throttle (>= 0.95 x) in a
// brownout failing 60 %, and in one failing 65 % (a margin: brownouts do not fail
// exactly the share a target names), with many callers and with two (a window of a
// few dozen calls, where chance moves the accepted share most); a smaller K would
// shed more of a destination accepting 10 % or less, but breaks that.
func TestThrottleModelChoosingK(t *testing.T) {
	const from, to = 1, 6
	type load struct {
		name    string
		callers int
		length  time.Duration
		shares  []float64
	}
	many := throttleStandardModel().callers
	manyShares := []float64{0.6, 0.65, 0.9, 0.99}
	if testing.Short() {
		manyShares = manyShares[:2] // the deeper brownouts are only logged, for comparison
	}
	loads := []load{
		{fmt.Sprintf("%d callers", many), many, 7 * time.Second, manyShares},
		{"2 callers", 2, 60 * time.Second, []float64{0.6, 0.65}},
	}
	candidates := []float64{2, 2.5, 3, 4}
	keeps := make(map[float64]bool)
	for _, k := range candidates {
		keeps[k] = true
	}
	var b strings.Builder
	for _, l := range loads {
		m := throttleStandardModel()
		m.callers, m.length = l.callers, l.length
		end := int(l.length/time.Second) - 1
		fmt.Fprintf(&b, "\n%s: goodput x no throttle (load on the destination x) at a failing share of\n   K |", l.name)
		none := make([]throttleSecond, len(l.shares))
		for i, f := range l.shares {
			fmt.Fprintf(&b, "      %3.0f %%      ", f*100)
			none[i] = m.run(t, ThrottlePolicy{}, throttleRandomFailures(f, from*time.Second, time.Duration(end)*time.Second), 7).sum(from, end)
		}
		for _, k := range candidates {
			fmt.Fprintf(&b, "\n %3.1f |", k)
			for i, f := range l.shares {
				w := m.run(t, ThrottlePolicy{K: k}, throttleRandomFailures(f, from*time.Second, time.Duration(end)*time.Second), 7).sum(from, end)
				goodput := float64(w.accepted) / float64(none[i].accepted)
				fmt.Fprintf(&b, "  %.3f (%.3f)  ", goodput, float64(w.sent)/float64(none[i].sent))
				if f <= 0.65 && goodput < 0.95 {
					keeps[k] = false
				}
			}
		}
	}
	t.Log(b.String())
	chosen := 0.0
	for _, k := range candidates {
		if keeps[k] {
			chosen = k
			break
		}
	}
	if chosen != throttleDefaultK {
		t.Errorf("the smallest K keeping the brownouts' goodput is %v, the default is %v", chosen, float64(throttleDefaultK))
	}
}

// TestThrottleModelOverload: a destination that accepts a fixed capacity (5 calls a
// second per caller: 1,000 for 200 callers) and fails the rest, asked for many times
// that. The throttle keeps the capacity's goodput and takes part of the failing load
// off the destination.
func TestThrottleModelOverload(t *testing.T) {
	m := throttleStandardModel()
	m.length = 12 * time.Second
	const from, to = 1, 9
	capacity := 5 * float64(m.callers)
	none := m.run(t, ThrottlePolicy{}, throttleCapacity(capacity, from*time.Second, to*time.Second), 3)
	with := m.run(t, DefaultThrottlePolicy(), throttleCapacity(capacity, from*time.Second, to*time.Second), 3)
	logSchedule(t, "overload", none, with, func(s int) string {
		if s >= from && s < to {
			return fmt.Sprintf("%.0f/s", capacity)
		}
		return "healthy"
	})
	n, w := none.sum(from+1, to), with.sum(from+1, to)
	goodput, load := float64(w.accepted)/float64(n.accepted), float64(w.sent)/float64(n.sent)
	t.Logf("overload, once the window has filled: goodput %.3f x no throttle, load on the destination %.3f x, mean reject probability %.3f",
		goodput, load, with.meanP(from+1, to))
	if goodput < 0.95 {
		t.Errorf("goodput under overload is %.3f x no throttle's, want at least 0.95", goodput)
	}
	if load > 0.75 {
		t.Errorf("the overloaded destination received %.3f x the calls of no throttle, want at most 0.75", load)
	}
	requireRecoveredWithin(t, with, to*time.Second, m.length, throttleRecovery)
	requireNeverRefusesEverything(t, none, with, 0, len(with.rows))
}

// TestThrottleModelHardDown: a destination that accepts nothing for 5 s, then
// everything. The throttle sheds nearly all the load while it is down (hard down is
// the circuit's to fail fast; the throttle keeps a trickle of evidence), and admits
// everything again within about a window of its return.
func TestThrottleModelHardDown(t *testing.T) {
	m := throttleStandardModel()
	m.length = 12 * time.Second
	const from, to = 2, 7
	dest := func() throttleDestination {
		return throttleDownDuring(func(at time.Duration) bool { return at >= from*time.Second && at < to*time.Second })
	}
	none := m.run(t, ThrottlePolicy{}, dest(), 5)
	with := m.run(t, DefaultThrottlePolicy(), dest(), 5)
	logSchedule(t, "hard down, then healthy", none, with, func(s int) string {
		if s >= from && s < to {
			return "down"
		}
		return "healthy"
	})
	load := float64(with.sum(from+1, to).sent) / float64(none.sum(from+1, to).sent)
	t.Logf("down, once the window has filled: load on the destination %.3f x no throttle", load)
	if load > 0.05 {
		t.Errorf("the down destination received %.3f x the calls of no throttle, want at most 0.05", load)
	}
	requireRecoveredWithin(t, with, to*time.Second, m.length, throttleRecovery)
	if after := float64(with.sum(to+1, len(with.rows)).accepted) / float64(none.sum(to+1, len(none.rows)).accepted); after < 0.99 {
		t.Errorf("goodput from a second after the return is %.3f x no throttle's, want at least 0.99", after)
	}
}

// TestThrottleModelFlapping: down 3 s, up 7 s, three times. Every up window is served
// at no throttle's rate within about a window of its start.
func TestThrottleModelFlapping(t *testing.T) {
	m := throttleStandardModel()
	m.length = 30 * time.Second
	down := func(at time.Duration) bool { return at%(10*time.Second) < 3*time.Second }
	none := m.run(t, ThrottlePolicy{}, throttleDownDuring(down), 9)
	with := m.run(t, DefaultThrottlePolicy(), throttleDownDuring(down), 9)
	logSchedule(t, "flapping", none, with, func(s int) string {
		if down(time.Duration(s) * time.Second) {
			return "down"
		}
		return "up"
	})
	all := float64(with.sum(0, len(with.rows)).accepted) / float64(none.sum(0, len(none.rows)).accepted)
	t.Logf("flapping: goodput %.3f x no throttle overall", all)
	if all < 0.9 {
		t.Errorf("goodput over the flapping is %.3f x no throttle's, want at least 0.9", all)
	}
	for up := 3; up < len(with.rows); up += 10 {
		requireRecoveredWithin(t, with, time.Duration(up)*time.Second, time.Duration(up+7)*time.Second, throttleRecovery)
	}
	requireNeverRefusesEverything(t, none, with, 0, len(with.rows))
}

// TestThrottleModelCountingRefusedCollapses shows why only sent calls count. With
// random failures, the SRE book's count (every attempt, refused ones included) settles
// where p = 1 - K*(1-f)*(1-p): for K*(1-f) < 1 the only fixed point is p = 1, and each
// window moves 1-p down by the factor K*(1-f). At K 3 and 75 % failing (factor 0.75)
// it refuses nearly everything within seconds, while the destination keeps accepting a
// quarter of what is sent. Counting sent calls only, p = 1 - K*(1-f) = 0.25, whatever
// was refused before.
func TestThrottleModelCountingRefusedCollapses(t *testing.T) {
	m := throttleStandardModel()
	m.length = 20 * time.Second
	const from, to = 1, 16
	dest := func() throttleDestination { return throttleRandomFailures(0.75, from*time.Second, to*time.Second) }
	sentOnly := m.run(t, DefaultThrottlePolicy(), dest(), 11)
	m.countRefused = true
	attempts := m.run(t, DefaultThrottlePolicy(), dest(), 11)
	logSchedule(t, "75 % failing; \"none\": counting sent calls only, \"throttle\": counting every attempt", sentOnly, attempts, func(s int) string {
		if s >= from && s < to {
			return "fail 75%"
		}
		return "healthy"
	})
	const late = to - 5 // the brownout's last 5 seconds
	pSent, pAll := sentOnly.meanP(late, to), attempts.meanP(late, to)
	gSent, gAll := sentOnly.sum(late, to).accepted, attempts.sum(late, to).accepted
	t.Logf("last 5 s of the brownout: counting sent calls p %.3f, goodput %d; counting every attempt p %.3f, goodput %d", pSent, gSent, pAll, gAll)
	if math.Abs(pSent-0.25) > 0.05 {
		t.Errorf("counting sent calls only, p = %.3f, want about 1 - K*(1-f) = 0.25", pSent)
	}
	if pAll < 0.95 || gAll*5 > gSent {
		t.Errorf("counting every attempt: p %.3f and goodput %d; want p >= 0.95 and under a fifth of %d", pAll, gAll, gSent)
	}
	requireRecoveredWithin(t, sentOnly, to*time.Second, m.length, throttleRecovery)
}

// TestThrottleModelGradual: the failing share climbs from 0 to 100 % over 10 s and
// falls back over 10 s. The probability follows max(0, 1 - K*(1-f)) for the share the
// window saw (the share half a window earlier), within 0.1, both ways.
func TestThrottleModelGradual(t *testing.T) {
	m := throttleStandardModel()
	m.length = 22 * time.Second
	share := func(at time.Duration) float64 {
		s := at.Seconds() - 1
		switch {
		case s < 0 || s >= 20:
			return 0
		case s < 10:
			return s / 10
		default:
			return (20 - s) / 10
		}
	}
	none := m.run(t, ThrottlePolicy{}, throttleFailing(share), 13)
	with := m.run(t, DefaultThrottlePolicy(), throttleFailing(share), 13)
	logSchedule(t, "gradual degradation and recovery", none, with, func(s int) string {
		return fmt.Sprintf("fail %.0f%%", 100*share(time.Duration(s)*time.Second+time.Second/2)) // mid-second
	})
	for s, row := range with.rows {
		end := time.Duration(s+1) * time.Second
		want := max(0, 1-throttleDefaultK*(1-share(end-throttleDefaultWindow/2)))
		if math.Abs(row.p-want) > 0.1 {
			t.Errorf("second %d: reject probability %.3f, want %.3f within 0.1 (failing %.0f %% half a window earlier)",
				s, row.p, want, 100*share(end-throttleDefaultWindow/2))
		}
	}
	requireNeverRefusesEverything(t, none, with, 0, len(with.rows))
}

// TestThrottleModelBlip: every call fails for 200ms, at full traffic. A blip shorter
// than a third of the window never outweighs K times the window's successes, so the
// throttle refuses nothing (the circuit is what judges a destination that accepts
// nothing).
func TestThrottleModelBlip(t *testing.T) {
	m := throttleStandardModel()
	m.length = 4 * time.Second
	down := func(at time.Duration) bool { return at >= 2*time.Second && at < 2200*time.Millisecond }
	none := m.run(t, ThrottlePolicy{}, throttleDownDuring(down), 17)
	with := m.run(t, DefaultThrottlePolicy(), throttleDownDuring(down), 17)
	logSchedule(t, "a 200ms blip", none, with, func(s int) string {
		if s == 2 {
			return "blip"
		}
		return "healthy"
	})
	if n := len(with.refusals); n > 0 {
		t.Errorf("the throttle refused %d calls over a 200ms blip, want none", n)
	}
}

// TestReleaseRecording checks that a slot's release tells the throttle the verdict
// once, on the slot's first release, by the limiter's clock reading, and nothing for
// Ignored or without a throttle.
func TestReleaseRecording(t *testing.T) {
	c := &throttleClock{}
	lim := NewLimiter(LimitPolicy{Max: 10}, c.now)
	th, err := NewThrottle(DefaultThrottlePolicy(), c.now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		th             *Throttle
		verdict        Result
		sent, accepted int64 // in the window after the release, cumulative
	}{
		{"success", th, Success, 1, 1},
		{"dropped", th, Dropped, 2, 1},
		{"failure", th, Failure, 3, 1},
		{"ignored", th, Ignored, 3, 1},
		{"no throttle", nil, Success, 3, 1},
	} {
		slot, err := lim.Acquire(1, Online)
		if err != nil {
			t.Fatal(err)
		}
		if !slot.ReleaseRecording(Success, tc.th, tc.verdict) || slot.ReleaseRecording(Success, tc.th, tc.verdict) {
			t.Fatalf("%s: the first release did not report itself as first, or a second one did", tc.name)
		}
		if s := th.Stats(); s.Sent != tc.sent || s.Accepted != tc.accepted {
			t.Fatalf("%s: window %d sent, %d accepted; want %d, %d", tc.name, s.Sent, s.Accepted, tc.sent, tc.accepted)
		}
	}
	if (Slot{}).ReleaseRecording(Success, th, Success) || th.Stats().Sent != 3 {
		t.Fatal("the zero Slot recorded a verdict")
	}
}
