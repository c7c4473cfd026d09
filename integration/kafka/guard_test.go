package kafka_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kafka"
)

// The first-hour scenario of issue 31: the guarded kafka.Publisher guarded again by
// its own registry, an outage, then a healthy broker. Guarding twice used to hold
// the only probe slot in the outer call and refuse the inner one for good (0
// published, circuit half-open); Guard now hands the publisher back as it is, so the
// circuit closes on the first probe and every later publish goes through.
func TestGuardedPublisherGuardedAgainRecovers(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second}, nil, "guardtwice")
	e.needKFake()
	pub := e.reg.Guard(e.pub, kafka.Classify)
	var down atomic.Bool
	down.Store(true)
	answerProduce(e.cluster, int16(kafkago.NotEnoughReplicas), true, func(string) bool { return down.Load() })
	ctx := context.Background()
	d := e.dest(0)
	for range 2 {
		if err := pub.Publish(ctx, d, msg(1)); err == nil {
			t.Fatal("a publish during the outage succeeded")
		}
	}
	if err := pub.Publish(ctx, d, msg(1)); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after the outage: %v; want the circuit open", err)
	}
	down.Store(false)
	e.clock.Advance(2 * time.Second)
	published := 0
	for i := range 20 {
		if err := pub.Publish(ctx, d, msg(i)); err == nil {
			published++
		}
	}
	if s := e.circuit(0); published != 20 || s.State != breaker.Closed {
		t.Fatalf("healthy broker after the break: %d of 20 published, circuit %v", published, s.State)
	}
}
