package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// benchCall measures one guarded call that succeeds, through Call, under policy p:
// the closed path every adapter takes.
func benchCall(b *testing.B, p registry.Policy) {
	reg, err := registry.New(p)
	if err != nil {
		b.Fatal(err)
	}
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := reg.Call(ctx, d, 1, nil, ok); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCallDefault is the closed path of DefaultPolicy: the circuit's permit, the
// throttle's admission (one atomic load) and the adaptive limit's slot, and at the
// end the throttle's record through the slot's release.
func BenchmarkCallDefault(b *testing.B) { benchCall(b, registry.DefaultPolicy()) }

// BenchmarkCallNoAdmission is the closed path of DefaultPolicy's circuit alone.
func BenchmarkCallNoAdmission(b *testing.B) {
	p := registry.DefaultPolicy()
	p.Admission = admission.Policy{}
	benchCall(b, p)
}

// BenchmarkCallOpenRejection is a call refused by an open circuit: admission is not
// asked.
func BenchmarkCallOpenRejection(b *testing.B) {
	p := registry.DefaultPolicy()
	p.Circuit = breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour}
	reg, err := registry.New(p)
	if err != nil {
		b.Fatal(err)
	}
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	ctx := context.Background()
	_ = reg.Call(ctx, d, 1, nil, func(context.Context) error { return context.Canceled })
	ok := func(context.Context) error { return nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := reg.Call(ctx, d, 1, nil, ok); err == nil {
				b.Fatal("admitted by an open circuit")
			}
		}
	})
}
