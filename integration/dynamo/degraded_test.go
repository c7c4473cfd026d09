package dynamo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// An item DynamoDB will not write: a replica whose probe lease would take the item
// over the 400 KB item limit (a huge owner name) has every lease write refused by
// dynalite. It probes for itself instead, one call at a time, keeps the probe's
// failure as local evidence (a longer local break) and reports itself degraded; the
// other replicas go on with the table.
func TestUnwritableItemKeepsLocalEvidence(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	p := sharedPolicy()
	healthy := newCircuit(t, e, p, sharedstate.WithClock(clk))
	huge := newCircuit(t, e, p, sharedstate.WithClock(clk), sharedstate.WithOwner(strings.Repeat("x", 410<<10)))
	for range p.FailureThreshold {
		p, err := healthy.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Failure)
	}
	clk.Advance(p.BreakDuration)
	probe, err := huge.Acquire(t.Context())
	if err != nil {
		t.Fatalf("Acquire after the break on a replica whose lease cannot be written: %v; want a local probe", err)
	}
	if !probe.Probe() {
		t.Fatal("the call admitted is not a probe")
	}
	if _, err := huge.Acquire(t.Context()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("a second call during the local probe: %v; want ErrOpen", err)
	}
	probe.Complete(breaker.Failure)
	s := huge.Snapshot()
	if s.DegradedSince.IsZero() || s.State != breaker.Open || s.NotBefore.Sub(clk.Now()) < p.BreakDuration-time.Millisecond {
		t.Fatalf("after the local probe failed: %+v; want open for a new break, degraded", s)
	}
	out, err := e.client.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: &e.table,
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: identity}}})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := out.Item["state"].(*types.AttributeValueMemberS); st == nil || st.Value != breaker.Open.String() {
		t.Fatalf("stored state %v; want still open (nothing the replica could not write)", out.Item["state"])
	}
	// The healthy replica takes the fleet's probe as usual.
	probe, err = healthy.Acquire(context.Background())
	if err != nil || !probe.Probe() {
		t.Fatalf("the healthy replica after the break: %v; want the shared probe", err)
	}
	probe.Complete(breaker.Success)
}

// The item deleted while the circuit is open: the replicas that knew it open write it
// back, and no call is admitted before the deadline they knew.
func TestDeletedItemWhileOpenIsWrittenBack(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	p := sharedPolicy()
	var replicas []*dynamo.Circuit
	for range 3 {
		replicas = append(replicas, newCircuit(t, e, p, sharedstate.WithClock(clk)))
	}
	for range p.FailureThreshold {
		permit, err := replicas[0].Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		permit.Complete(breaker.Failure)
	}
	deadline := replicas[0].Snapshot().NotBefore
	for _, c := range replicas[1:] {
		if _, err := c.Acquire(t.Context()); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("Acquire on an open circuit: %v", err)
		}
	}
	if _, err := e.client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{TableName: &e.table,
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: identity}}}); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for clk.Advance(time.Second); clk.Now().Before(deadline); clk.Advance(250 * time.Millisecond) {
		for _, c := range replicas {
			if permit, err := c.Acquire(t.Context()); err == nil {
				admitted++
				permit.Complete(breaker.Failure)
			}
		}
	}
	if admitted != 0 {
		t.Fatalf("%d calls admitted before the open deadline after the item was deleted; want 0", admitted)
	}
}
