package kafka_test

import (
	"context"
	"runtime"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/interleave"
	"github.com/brokerguard/brokerguard/transport"
)

// BenchmarkWrite writes the same one-message batches through the raw writer and
// through the guarded publisher (its WriteMessages and its Publish), in one run,
// through one writer to one kfake broker. BatchSize 1 sends each message at once.
func BenchmarkWrite(b *testing.B) {
	// kfake keeps every record in memory; trimming the log before each run keeps
	// the heap, and so the GC cost, the same for every sub-benchmark.
	retention := kfake.BrokerConfigs(map[string]string{"log.retention.bytes": "65536"})
	e := newEnvWith(b, breaker.Policy{FailureThreshold: 5, BreakDuration: 1e9}, func(e *env) {
		e.w.BatchSize = 1
		e.w.RequiredAcks = kafkago.RequireOne
	}, []kfake.Opt{retention}, "bench")
	ctx := context.Background()
	value := make([]byte, 256)
	km := kafkago.Message{Topic: e.topics[0], Key: []byte("key"), Value: value, Headers: []kafkago.Header{{Key: "h", Value: []byte("v")}}}
	tm := transport.Message{Key: km.Key, Value: value, Headers: []transport.Header{{Key: "h", Value: []byte("v")}}}
	d := e.dest(0)
	run := func(name string, write func() error) {
		b.Run(name, func(b *testing.B) {
			if e.cluster != nil {
				e.cluster.ApplyRetention()
			}
			runtime.GC()
			b.ReportAllocs()
			for b.Loop() {
				if err := write(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("raw", func() error { return e.w.WriteMessages(ctx, km) })
	run("guarded", func() error { return e.pub.WriteMessages(ctx, km) })
	run("guarded-publish", func() error { return e.pub.Publish(ctx, d, tm) })

	// Alternating raw and guarded writes in one loop gives both the same machine
	// state, which separate sub-benchmarks on a shared machine do not: this is the
	// ratio to quote.
	b.Run("interleaved", func(b *testing.B) {
		if e.cluster != nil {
			e.cluster.ApplyRetention()
		}
		runtime.GC()
		interleave.Run(b, func() error { return e.w.WriteMessages(ctx, km) }, func() error { return e.pub.Publish(ctx, d, tm) })
	})
}
