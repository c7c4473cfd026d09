package natsguard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/interleave"
	"github.com/brokerguard/brokerguard/transport"
)

// BenchmarkPublish compares the guarded publisher with the raw JetStream context,
// alternating in one loop on one connection to the machine's server: a synchronous
// publish of one message, and a burst of 100 asynchronous publishes whose acks are
// all awaited (raw: each future's Ok or Err; guarded: each promise). raw/guarded is
// the guarded throughput relative to the raw one (1 means no cost); the raw-vs-raw
// pair is this machine's noise floor for it.
//
// The raw messages of sync and async-100 carry what the Publisher adds to every
// message, Nats-Expected-Stream, so that the pair measures the guard; the
// expected-stream pairs measure that header alone (raw without it against raw with
// it), which is the server's work, not the client's.
func BenchmarkPublish(b *testing.B) {
	// The raw context has the ack timeout the Publisher's own asynchronous context has
	// (without one, a stalled server's futures never end): the same client settings.
	e := newEnv(b, machine(b), breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute},
		[]jetstream.JetStreamOpt{jetstream.WithPublishAsyncTimeout(5 * time.Second)})
	d, subj := newStream(b, e.js, "bench", jetstream.StreamConfig{MaxMsgs: 100_000})
	ctx := context.Background()
	value := make([]byte, 256)
	subject := subj("orders")
	plain := func() *nats.Msg {
		return &nats.Msg{Subject: subject, Data: value, Header: nats.Header{"h": []string{"v"}}}
	}
	raw := func() *nats.Msg {
		return &nats.Msg{Subject: subject, Data: value,
			Header: nats.Header{"h": []string{"v"}, jetstream.ExpectedStreamHeader: []string{d.Name}}}
	}
	tm := transport.Message{Key: []byte(subject), Value: value, Headers: []transport.Header{{Key: "h", Value: []byte("v")}}}
	run := func(name string, raw, guarded func() error) { interleave.Sub(b, name, nil, raw, guarded) }

	rawSync := func() error { _, err := e.js.PublishMsg(ctx, raw()); return err }
	plainSync := func() error { _, err := e.js.PublishMsg(ctx, plain()); return err }
	run("sync", rawSync, func() error { return e.p.Publish(ctx, d, tm) })
	run("raw-vs-raw-sync", rawSync, rawSync)
	run("expected-stream-sync", plainSync, rawSync)

	const burst = 100
	rawBurst := func(msg func() *nats.Msg) error {
		fs := make([]jetstream.PubAckFuture, 0, burst)
		for range burst {
			f, err := e.js.PublishMsgAsync(msg())
			if err != nil {
				return err
			}
			fs = append(fs, f)
		}
		var first error
		for _, f := range fs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				first = err
			}
		}
		return first
	}
	rawAsync := func() error { return rawBurst(raw) }
	guardedAsync := func() error {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		wg.Add(burst)
		for range burst {
			if err := e.p.PublishAsync(ctx, d, tm, func(_ *jetstream.PubAck, err error) {
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
				wg.Done()
			}); err != nil {
				return err
			}
		}
		wg.Wait()
		return first
	}
	run("async-100", rawAsync, guardedAsync)
	run("raw-vs-raw-async-100", rawAsync, rawAsync)
	run("expected-stream-async-100", func() error { return rawBurst(plain) }, rawAsync)
}
