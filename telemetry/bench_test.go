package telemetry_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

var benchPolicy = breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}

// guardedPublisher returns a guarded publisher over raw, with telemetry when on: a
// registry built with a Recorder's options (so it counts calls) and Metrics on an SDK
// MeterProvider.
func guardedPublisher(tb testing.TB, raw transport.Publisher, on bool) (transport.Publisher, *registry.Registry) {
	tb.Helper()
	if !on {
		reg, err := registry.New(registry.Policy{Circuit: benchPolicy})
		if err != nil {
			tb.Fatal(err)
		}
		return reg.Guard(raw, nil), reg
	}
	rec := telemetry.NewRecorder()
	reg, err := registry.New(registry.Policy{Circuit: benchPolicy}, rec.RegistryOptions()...)
	if err != nil {
		tb.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = m.Close() })
	return reg.Guard(raw, nil), reg
}

var noop = publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error { return nil })

// BenchmarkGuardedPublish compares guarded publishes with telemetry off and on: a
// successful one ("ok"; the ratio of the off and on ns/op is the telemetry's cost on
// the publish path) and one an open circuit rejects ("rejected"; on counts it).
func BenchmarkGuardedPublish(b *testing.B) {
	for _, call := range []struct {
		name   string
		setup  func(testing.TB, bool) transport.Publisher
		reject bool
	}{
		{"ok", func(tb testing.TB, on bool) transport.Publisher { p, _ := guardedPublisher(tb, noop, on); return p }, false},
		{"rejected", func(tb testing.TB, on bool) transport.Publisher { p, _ := openCircuit(tb, on); return p }, true},
	} {
		for _, tel := range []string{"off", "on"} {
			b.Run(call.name+"/"+tel, func(b *testing.B) {
				pub := call.setup(b, tel == "on")
				ctx, msgs := context.Background(), []transport.Message{{Value: []byte("v")}} // built once: the caller's allocation is not measured
				b.ReportAllocs()
				for b.Loop() {
					if err := pub.Publish(ctx, orders, msgs...); (err != nil) != call.reject {
						b.Fatalf("publish: %v", err)
					}
				}
			})
		}
	}
}

// openCircuit returns a guarded publisher whose circuit for orders is forced open.
func openCircuit(tb testing.TB, on bool) (transport.Publisher, *registry.Registry) {
	tb.Helper()
	pub, reg := guardedPublisher(tb, noop, on)
	c, err := reg.Circuit(orders)
	if err != nil {
		tb.Fatal(err)
	}
	c.(*breaker.Breaker).ForceOpen(time.Now().Add(time.Hour))
	return pub, reg
}

// BenchmarkGuardedPublishRatio measures successful guarded publishes with telemetry
// off and on in alternating blocks, so that a change in the machine's load hits both
// alike, and reports the ratio off/on of their times (at least 0.95 is the target).
func BenchmarkGuardedPublishRatio(b *testing.B) {
	off, _ := guardedPublisher(b, noop, false)
	on, _ := guardedPublisher(b, noop, true)
	ctx, msgs := context.Background(), []transport.Message{{Value: []byte("v")}} // built once: the caller's allocation is not measured
	const block = 512
	run := func(pub transport.Publisher) time.Duration {
		start := time.Now()
		for range block {
			if err := pub.Publish(ctx, orders, msgs...); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	var tOff, tOn time.Duration
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		if n%2 == 0 {
			tOff += run(off)
			tOn += run(on)
		} else {
			tOn += run(on)
			tOff += run(off)
		}
		n++
	}
	calls := float64(n * block)
	b.ReportMetric(float64(tOff.Nanoseconds())/calls, "off-ns/publish")
	b.ReportMetric(float64(tOn.Nanoseconds())/calls, "on-ns/publish")
	b.ReportMetric(float64(tOff)/float64(tOn), "off/on")
}

// BenchmarkGuardedPublishParallel publishes to one destination from every core, with
// telemetry off and on: on, the callers share the destination's call counter, the
// one write telemetry adds to the publish path.
func BenchmarkGuardedPublishParallel(b *testing.B) {
	for _, tel := range []string{"off", "on"} {
		b.Run(tel, func(b *testing.B) {
			pub, _ := guardedPublisher(b, noop, tel == "on")
			msgs := []transport.Message{{Value: []byte("v")}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if err := pub.Publish(ctx, orders, msgs...); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
