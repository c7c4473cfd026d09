package admission

import (
	"math"
	"sync/atomic"
	"testing"
	"time"
)

// The throttle's hot path against bare atomic counters, in the same run: run with
// -cpu 1,2 -benchmem and read ns/op as ratios to BenchmarkThrottleBaselineCounter (one
// shared line) and BenchmarkThrottleBaselinePrivateCounter (a line per goroutine).

// BenchmarkThrottleBaselineCounter is the baseline: one shared atomic add per call,
// what the least a per-call count costs.
func BenchmarkThrottleBaselineCounter(b *testing.B) {
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
		}
	})
}

// BenchmarkThrottleBaselinePrivateCounter is the other bound: an atomic add on a
// cache line of each goroutine's own, what perfect striping would cost.
func BenchmarkThrottleBaselinePrivateCounter(b *testing.B) {
	lines := make([]throttleStripe, 64)
	var goroutines atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		n := &lines[goroutines.Add(1)%int64(len(lines))].refused
		for pb.Next() {
			n.Add(1)
		}
	})
}

// BenchmarkThrottleAdmitRecord is a call on the zero-probability path: Admit (one
// atomic load) and a Record (a compare-and-swap on one of the stripes). "clock": Record
// reads the clock, most of the cost. "timed": the caller has already read the clock
// (the admission controller reads it for the adaptive limit and hands the reading
// on), the throttle's own share of a call; each goroutine's time moves 1µs a call
// from a start of its own (real readings on two cores differ), so that buckets fill
// and rotate as under real traffic.
func BenchmarkThrottleAdmitRecord(b *testing.B) {
	for _, timed := range []bool{false, true} {
		name := "clock"
		if timed {
			name = "timed"
		}
		b.Run(name, func(b *testing.B) {
			th, err := NewThrottle(DefaultThrottlePolicy(), nil)
			if err != nil {
				b.Fatal(err)
			}
			var goroutines atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				now := goroutines.Add(1) * 7919 // nanoseconds
				for pb.Next() {
					if th.Admit() != nil {
						b.Error("refused at probability 0")
						return
					}
					if timed {
						now += int64(time.Microsecond)
						th.recordAt(now, true)
					} else {
						th.Record(true)
					}
				}
			})
			if p := throttleProbability(th.threshold.Load()); p != 0 {
				b.Fatalf("reject probability %v after successes only", p)
			}
		})
	}
}

// BenchmarkThrottleAdmit is admission alone at probability 0.
func BenchmarkThrottleAdmit(b *testing.B) {
	th, err := NewThrottle(DefaultThrottlePolicy(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if th.Admit() != nil {
				b.Error("refused at probability 0")
				return
			}
		}
	})
}

// BenchmarkThrottleRefusing is admission while refusing about 70 % of calls (a
// destination accepting a tenth): a clock read, a draw, and a cached refusal.
func BenchmarkThrottleRefusing(b *testing.B) {
	var at atomic.Int64
	th, err := NewThrottle(ThrottlePolicy{K: 3, Window: time.Hour}, func() time.Time {
		return throttleBase.Add(time.Duration(at.Load()))
	})
	if err != nil {
		b.Fatal(err)
	}
	recordN(th, 1000, 100)
	at.Store(int64(time.Hour / throttleBuckets)) // the next bucket: the probability is revised, and stays
	if p := th.Stats().RejectProbability; math.Abs(p-0.7) > 0.01 {
		b.Fatalf("reject probability %v, want about 0.7", p)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = th.Admit()
		}
	})
}
