package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Every case uses RunParallel, so -cpu 1 measures one goroutine and -cpu 2 adds
// contention the same way for every implementation.

var errDown = errors.New("down")

func ours(b *testing.B) *breaker.Breaker {
	cb, err := breaker.New("bench", breaker.Policy{FailureThreshold: 5, BreakDuration: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	return cb
}

// ramping returns our breaker just closed from half-open, ramping for an hour from a
// floor of share: a share near 1 measures the ramp's admission, a small one its
// refusal.
func ramping(b *testing.B, share float64) *breaker.Breaker {
	cb, err := breaker.New("bench", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Nanosecond,
		ProbeLease: time.Hour, RampDuration: time.Hour, RampFloor: share})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	p, _ := cb.Acquire(ctx)
	p.Complete(breaker.Failure)
	for cb.State() != breaker.Closed {
		if p, err := cb.Acquire(ctx); err == nil {
			p.Complete(breaker.Success)
		}
	}
	if cb.Snapshot().RampUntil.IsZero() {
		b.Fatal("the breaker is not ramping")
	}
	return cb
}

// acquireAny runs Acquire in parallel, completing what is admitted with Success.
func acquireAny(b *testing.B, cb *breaker.Breaker) {
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if p, err := cb.Acquire(ctx); err == nil {
				p.Complete(breaker.Success)
			}
		}
	})
}

func gobreakerTwoStep() *gobreaker.TwoStepCircuitBreaker[any] {
	return gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
		Name:        "bench",
		Timeout:     time.Hour,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 5 },
	})
}

func failsafe() circuitbreaker.CircuitBreaker[any] {
	return circuitbreaker.NewBuilder[any]().WithFailureThreshold(5).WithDelay(time.Hour).Build()
}

func BenchmarkClosed(b *testing.B) {
	b.Run("atomic-floor", func(b *testing.B) {
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Add(1)
			}
		})
	})
	b.Run("brokerguard", func(b *testing.B) {
		cb, ctx := ours(b), context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := cb.Acquire(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				p.Complete(breaker.Success)
			}
		})
	})
	b.Run("ramping", func(b *testing.B) {
		// Admission while ramping (99% admitted): one clock read, no lock.
		acquireAny(b, ramping(b, 0.99))
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := gobreakerTwoStep()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				done, err := cb.Allow()
				if err != nil {
					b.Error(err)
					return
				}
				done(nil)
			}
		})
	})
	b.Run("failsafe", func(b *testing.B) {
		cb := failsafe()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !cb.TryAcquirePermit() {
					b.Error("rejected by a closed circuit")
					return
				}
				cb.RecordSuccess()
			}
		})
	})
}

func BenchmarkOpen(b *testing.B) {
	b.Run("brokerguard", func(b *testing.B) {
		cb, ctx := ours(b), context.Background()
		cb.ForceOpen(time.Now().Add(time.Hour))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := cb.Acquire(ctx); err == nil {
					b.Error("admitted by an open circuit")
					return
				}
			}
		})
	})
	b.Run("ramping", func(b *testing.B) {
		// A ramp's refusal (1% admitted), beside the open circuit's.
		acquireAny(b, ramping(b, 0.01))
	})
	b.Run("gobreaker", func(b *testing.B) {
		cb := gobreakerTwoStep()
		for range 5 {
			done, _ := cb.Allow()
			done(errDown)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := cb.Allow(); err == nil {
					b.Error("admitted by an open circuit")
					return
				}
			}
		})
	})
	b.Run("failsafe", func(b *testing.B) {
		cb := failsafe()
		cb.Open()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if cb.TryAcquirePermit() {
					b.Error("admitted by an open circuit")
					return
				}
			}
		})
	})
}

type nopPublisher struct{}

// unguarded is a package variable so that the compiler cannot see through the
// interface: the baseline pays for the dynamic call (and the variadic slice that
// escapes through it) exactly as the guarded publisher's callers do.
var unguarded transport.Publisher = nopPublisher{}

func (nopPublisher) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return nil
}

// BenchmarkGuard is the whole guarded publish: registry lookup, Acquire, the
// publisher, classification and Complete.
func BenchmarkGuard(b *testing.B) {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("unguarded", func(b *testing.B) { // the same call through the interface, no circuit
		pub := unguarded
		d, msg, ctx := transport.Destination{Broker: "kafka", Name: "orders"}, transport.Message{Value: []byte("x")}, context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				pub.Publish(ctx, d, msg)
			}
		})
	})
	b.Run("brokerguard", func(b *testing.B) {
		pub := reg.Guard(nopPublisher{}, nil)
		d, msg, ctx := transport.Destination{Broker: "kafka", Name: "orders"}, transport.Message{Value: []byte("x")}, context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := pub.Publish(ctx, d, msg); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	// A caller with a deadline: the deadline rule reads the clock once per call.
	b.Run("brokerguard-deadline", func(b *testing.B) {
		pub := reg.Guard(nopPublisher{}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		d, msg := transport.Destination{Broker: "kafka", Name: "orders"}, transport.Message{Value: []byte("x")}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := pub.Publish(ctx, d, msg); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// TestPeersBehaveAsBenchmarked keeps the benchmarks honest: each closed circuit admits,
// and each open one rejects, so no case measures a path other than the one it names.
func TestPeersBehaveAsBenchmarked(t *testing.T) {
	g := gobreakerTwoStep()
	if _, err := g.Allow(); err != nil {
		t.Fatal("gobreaker closed rejects")
	}
	for range 6 {
		if done, err := g.Allow(); err == nil {
			done(errDown)
		}
	}
	if _, err := g.Allow(); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("gobreaker after failures: %v", err)
	}
	f := failsafe()
	if !f.TryAcquirePermit() {
		t.Fatal("failsafe closed rejects")
	}
	f.Open()
	if f.TryAcquirePermit() {
		t.Fatal("failsafe open admits")
	}
	cb, err := breaker.New("t", breaker.Policy{FailureThreshold: 5, BreakDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cb.ForceOpen(time.Now().Add(time.Hour))
	if _, err := cb.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("ours open: %v", err)
	}
}
