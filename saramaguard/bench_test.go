package saramaguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/interleave"
	"github.com/brokerguard/brokerguard/transport"
)

// BenchmarkSend compares the guarded producers with raw sarama ones, alternating in
// one loop against one kfake broker: a one-message SendMessage against the guarded
// SendMessage and Publish, and a burst of 100 asynchronous sends (all reported)
// against the guarded AsyncProducer's.
func BenchmarkSend(b *testing.B) {
	e := newEnv(b, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, "bench")
	e.readTimeout = 10 * time.Second // no fault here: a loaded machine must not fail a run
	ctx := context.Background()
	value := make([]byte, 256)
	message := func() *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: e.topics[0], Key: sarama.StringEncoder("key"), Value: sarama.ByteEncoder(value),
			Headers: []sarama.RecordHeader{{Key: []byte("h"), Value: []byte("v")}}}
	}
	tm := transport.Message{Key: []byte("key"), Value: value, Headers: []transport.Header{{Key: "h", Value: []byte("v")}}}
	run := func(name string, raw, guarded func() error) {
		interleave.Sub(b, name, e.cluster.ApplyRetention, raw, guarded)
	}
	rawSync, guardedSync := e.sync()
	rawSend := func() error { _, _, err := rawSync.SendMessage(message()); return err }
	run("sync-sendmessage", rawSend, func() error { _, _, err := guardedSync.SendMessage(ctx, message()); return err })
	run("sync-publish", rawSend, func() error { return guardedSync.Publish(ctx, e.dest(0), tm) })

	const burst = 100
	rawAsync, err := sarama.NewAsyncProducer(e.cluster.ListenAddrs(), e.config())
	if err != nil {
		b.Fatal(err)
	}
	defer rawAsync.Close()
	guardedAsync := e.async()
	run("async-100", func() error {
		for range burst {
			rawAsync.Input() <- message()
		}
		return awaitBurst(burst, rawAsync.Successes(), rawAsync.Errors())
	}, func() error {
		for range burst {
			if err := guardedAsync.Send(ctx, message()); err != nil {
				return err
			}
		}
		return awaitBurst(burst, guardedAsync.Successes(), guardedAsync.Errors())
	})
}

// awaitBurst waits for n reports, returning the first error reported.
func awaitBurst(n int, successes <-chan *sarama.ProducerMessage, errs <-chan *sarama.ProducerError) error {
	var first error
	for range n {
		select {
		case <-successes:
		case pe := <-errs:
			if first == nil {
				first = pe
			}
		}
	}
	return first
}
