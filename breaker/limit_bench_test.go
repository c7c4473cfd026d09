package breaker_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// BenchmarkLimitedAcquireComplete is BenchmarkClosedAcquireComplete with the
// recommended adaptive limit on: admission is lock-free (atomics and one clock read),
// completion reads the clock and updates the limit at most once per window.
func BenchmarkLimitedAcquireComplete(b *testing.B) {
	cb, err := breaker.New("bench", breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second, Limit: breaker.RecommendedLimit()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	r := breaker.Request{Weight: 1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := cb.AcquireRequest(ctx, r)
			if err != nil {
				b.Fatal(err)
			}
			p.Complete(breaker.Success)
		}
	})
}

// BenchmarkLimitRefusal measures a refusal over the adaptive limit: no lock, no
// allocation (the refusal is cached per millisecond of NotBefore).
func BenchmarkLimitRefusal(b *testing.B) {
	cb, err := breaker.New("bench", breaker.Policy{Limit: breaker.LimitPolicy{Max: 1}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cb.AcquireRequest(ctx, breaker.Request{}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := cb.AcquireRequest(ctx, breaker.Request{}); err == nil {
				b.Fatal("admitted over the limit")
			}
		}
	})
}
