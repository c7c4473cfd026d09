package admission

import (
	"errors"
	"math"
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
	if !errors.As(err, &te) || !errors.Is(err, ErrThrottled) {
		t.Fatalf("Admit = %v, want a *ThrottleError that is ErrThrottled", err)
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
	th, _ := newClockedThrottle(t, ThrottlePolicy{K: 3})
	th.mask = 0 // one stripe takes every record
	recordN(th, throttleCountMask+10, throttleCountMask+10)
	if s := th.Stats(); s.Sent != throttleCountMask || s.Accepted != throttleCountMask {
		t.Fatalf("window holds %d sent, %d accepted; want both %d", s.Sent, s.Accepted, throttleCountMask)
	}
}
