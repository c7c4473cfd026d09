package breaker_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

func BenchmarkClosedAcquireComplete(b *testing.B) {
	cb, err := breaker.New("bench", breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := cb.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			p.Complete(breaker.Success)
		}
	})
}

func BenchmarkOpenRejection(b *testing.B) {
	cb, err := breaker.New("bench", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	p, _ := cb.Acquire(ctx)
	p.Complete(breaker.Failure)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := cb.Acquire(ctx); err == nil {
				b.Fatal("admitted by an open circuit")
			}
		}
	})
}
