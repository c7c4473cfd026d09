package saramaguard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/internal/kafkacode"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/saramaguard"
)

// A producer over the caller's client guards its sends like one that dials its own:
// every message is reported, its permit completed with the broker's answer, and
// closing the producer leaves the client, which the caller owns, open.
func TestAsyncProducerFromClient(t *testing.T) {
	e := newEnv(t, counting, "orders")
	client, err := sarama.NewClient(e.cluster.ListenAddrs(), e.config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	p, err := saramaguard.NewAsyncProducerFromClient(client, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	done, ok, failed := drain(p, func(pe *sarama.ProducerError) { t.Errorf("message failed: %v", pe.Err) })
	const n = 5
	for i := range n {
		if err := p.Send(context.Background(), e.message(0, i)); err != nil {
			t.Fatal(err)
		}
	}
	p.AsyncClose()
	<-done
	if *ok != n || *failed != 0 {
		t.Errorf("%d succeeded, %d failed; want %d, 0", *ok, *failed, n)
	}
	if s := e.circuit(0); s.InFlight != 0 || s.Failures != 0 {
		t.Errorf("circuit after %d successes: %d in flight, %d failures", n, s.InFlight, s.Failures)
	}
	if client.Closed() {
		t.Error("closing the producer closed the caller's client")
	}

	// Failures reported through the client's producer count on the circuit.
	kfakeproduce.Answer(e.cluster, kafkacode.NotLeaderForPartition, true, nil)
	p2, err := saramaguard.NewAsyncProducerFromClient(client, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	done, _, failed = drain(p2, func(*sarama.ProducerError) {})
	if err := p2.Send(context.Background(), e.message(0, n)); err != nil {
		t.Fatal(err)
	}
	p2.AsyncClose()
	<-done
	if s := e.circuit(0); *failed != 1 || s.Failures != 1 || s.InFlight != 0 {
		t.Errorf("after a refused message: %d reported failed, circuit %d failures, %d in flight; want 1, 1, 0", *failed, s.Failures, s.InFlight)
	}
}

// A nil client, or one whose config does not report every message, is refused
// with an error naming what is wrong.
func TestAsyncProducerFromClientRefusesBadInput(t *testing.T) {
	e := newEnv(t, counting, "orders")
	if _, err := saramaguard.NewAsyncProducerFromClient(nil, e.reg); err == nil {
		t.Error("nil client: no error")
	}
	cfg := e.config()
	cfg.Producer.Return.Errors = false
	client, err := sarama.NewClient(e.cluster.ListenAddrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	_, err = saramaguard.NewAsyncProducerFromClient(client, e.reg)
	if err == nil || !strings.Contains(err.Error(), "Producer.Return.Errors") {
		t.Errorf("config without Return.Errors: %v", err)
	}
}
