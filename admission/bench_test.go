package admission_test

import (
	"testing"

	"github.com/brokerguard/brokerguard/admission"
)

// BenchmarkAcquireRelease is a call admitted and released by the default limit:
// atomics and a clock read each way, a lock at most once per Window, no allocation.
func BenchmarkAcquireRelease(b *testing.B) {
	lim := admission.NewLimiter(admission.DefaultPolicy().Limit, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, err := lim.Acquire(1, admission.Online)
			if err != nil {
				b.Fatal(err)
			}
			s.Release(admission.Success)
		}
	})
}

// BenchmarkRefusal is a call over the limit: no lock, no allocation (the refusal is
// cached per millisecond of NotBefore).
func BenchmarkRefusal(b *testing.B) {
	lim := admission.NewLimiter(admission.LimitPolicy{Max: 1}, nil)
	if _, err := lim.Acquire(1, admission.Online); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := lim.Acquire(1, admission.Online); err == nil {
				b.Fatal("admitted over the limit")
			}
		}
	})
}
