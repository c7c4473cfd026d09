package kgoguard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/interleave"
	"github.com/brokerguard/brokerguard/transport"
)

// BenchmarkProduce compares the guarded producer with the raw client, alternating in
// one loop on one client to one kfake broker: a one-record ProduceSync against
// Publish and the guarded ProduceSync, and a burst of 100 asynchronous Produce calls
// (all promises awaited) against the guarded Produce.
func BenchmarkProduce(b *testing.B) {
	e := newEnv(b, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, []string{"bench"})
	ctx := context.Background()
	value := make([]byte, 256)
	record := func() *kgo.Record {
		return &kgo.Record{Topic: e.topics[0], Key: []byte("key"), Value: value, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}
	}
	tm := transport.Message{Key: []byte("key"), Value: value, Headers: []transport.Header{{Key: "h", Value: []byte("v")}}}
	run := func(name string, raw, guarded func() error) {
		interleave.Sub(b, name, e.cluster.ApplyRetention, raw, guarded)
	}
	rawSync := func() error { return e.cl.ProduceSync(ctx, record()).FirstErr() }
	run("sync-publish", rawSync, func() error { return e.p.Publish(ctx, e.dest(0), tm) })
	run("sync-producesync", rawSync, func() error { return e.p.ProduceSync(ctx, record()).FirstErr() })

	const burst = 100
	async := func(produce func(context.Context, *kgo.Record, func(*kgo.Record, error))) func() error {
		return func() error {
			var wg sync.WaitGroup
			var mu sync.Mutex
			var first error
			wg.Add(burst)
			for range burst {
				produce(ctx, record(), func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						first = err
						mu.Unlock()
					}
					wg.Done()
				})
			}
			wg.Wait()
			return first
		}
	}
	run("async-100", async(e.cl.Produce), async(e.p.Produce))
	// Raw against raw: the noise floor of this machine for the figures above.
	run("raw-vs-raw-async-100", async(e.cl.Produce), async(e.cl.Produce))
}
