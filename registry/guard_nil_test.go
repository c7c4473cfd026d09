package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

type failingPublisher struct{ err error }

func (f failingPublisher) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return f.err
}

// Guard with a nil classifier takes every error as a Failure.
func TestGuardWithoutClassifierCountsFailures(t *testing.T) {
	r, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	g := r.Guard(failingPublisher{refused}, nil)
	if err := g.Publish(context.Background(), orders, transport.Message{Value: []byte("x")}); !errors.Is(err, refused) {
		t.Fatalf("Publish: %v", err)
	}
	if s, _ := r.Snapshot(orders); s.Failures != 1 {
		t.Fatalf("circuit %+v; want one Failure", s)
	}
}

// The publisher Guard returns for a nil classifier tells code that asks for its
// classifier (transport.Classifying, as the outbox's Processor does) the one it
// judges by: every error a Failure. A nil there would leave that code without one.
func TestGuardWithoutClassifierReportsTheFailAllClassifier(t *testing.T) {
	c, ok := newRegistry(t).Guard(failingPublisher{}, nil).(transport.Classifying)
	if !ok {
		t.Fatal("the guarded publisher does not report its classifier")
	}
	f := c.Classifier()
	if f == nil {
		t.Fatal("Classifier() = nil for a publisher guarded without a classifier")
	}
	if o := f(errors.New("broker down")); o != breaker.Failure {
		t.Fatalf("the reported classifier makes an error %v, want Failure", o)
	}
}
