package bench

import (
	"context"
	"testing"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// adaptiveSetting is the "adaptive" column of the slow-broker scenario and the
// "recommended set-up" of the drain scenario: registry.DefaultPolicy (circuit,
// adaptive limit and throttle), one registry shared by online publishers and the
// outbox, which marks its own publishes as bulk work. It reports false while the
// recommended set-up does not exist.
func adaptiveSetting() (registry.Policy, []registry.Option, bool) {
	return registry.DefaultPolicy(), nil, true
}

// BenchmarkGuardedCall is the closed path of a guarded call that succeeds, at once,
// through registry.Call: DefaultPolicy (circuit, adaptive limit and throttle); the
// same with admission control off (the circuit alone); and failsafe-go v0.9.8's
// circuit breaker with its adaptive limiter, both with their defaults, a permit of
// each taken and recorded by hand (what its executor does, without the executor's
// own allocations). Run it with -cpu 1,2: the ratios are what to compare.
func BenchmarkGuardedCall(b *testing.B) {
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	ok := func(context.Context) error { return nil }
	guarded := func(p registry.Policy) func(b *testing.B) {
		return func(b *testing.B) {
			reg, err := registry.New(p)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := reg.Call(ctx, d, 1, nil, ok); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}
	b.Run("DefaultPolicy", guarded(registry.DefaultPolicy()))
	limitOff := registry.DefaultPolicy()
	limitOff.Admission.Limit = admission.LimitPolicy{}
	b.Run("limit off", guarded(limitOff))
	admissionOff := registry.DefaultPolicy()
	admissionOff.Admission = admission.Policy{}
	b.Run("admission off", guarded(admissionOff))
	b.Run("failsafe-go breaker+limiter", func(b *testing.B) {
		cb := circuitbreaker.NewBuilder[any]().Build()
		lim := adaptivelimiter.NewBuilder[any]().Build()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !cb.TryAcquirePermit() {
					b.Error("rejected by a closed circuit")
					return
				}
				p, ok := lim.TryAcquirePermit()
				if !ok {
					cb.RecordSuccess() // not a verdict on the destination; release the circuit's permit
					continue
				}
				p.Record()
				cb.RecordSuccess()
			}
		})
	})
}
