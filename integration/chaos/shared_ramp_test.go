package chaos

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/transport"
)

// The fleet ramps together: 8 replicas share one circuit on dynalite, and one of them
// closes it with its probe. Every replica reads the close time from the shared item,
// so the 1,000 callers of the whole fleet get the ramp's share in each 100 ms, to
// within 2 % of the full load, though 7 of the replicas never saw the probe.
func TestSharedFleetRampsTogether(t *testing.T) {
	const fleetSize, perReplica = 8, 125
	endpoint := harness.Dynalite(t)
	client := harness.DynamoDBClient(endpoint)
	table := harness.DynamoDBTable(t, client, "chaos-ramp-")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	clock := fakeclock.New(start)
	policy := breaker.Policy{FailureThreshold: 1, BreakDuration: breakTime, ProbeLease: time.Minute,
		RampDuration: herdRamp, Scope: breaker.SharedDependency}
	fleet := make([]*dynamo.Circuit, fleetSize)
	for i := range fleet {
		c, err := dynamo.New(client, table, "kafka:orders", policy, sharedstate.WithClock(clock),
			sharedstate.WithOwner("replica-"+strconv.Itoa(i)), sharedstate.WithMaxStaleness(herdTick),
			sharedstate.WithIOTimeout(15*time.Second)) // a loaded machine must not turn slow answers into outages
		if err != nil {
			t.Fatal(err)
		}
		fleet[i] = c
	}
	broker := &recoveringBroker{clock: clock, recovered: start.Add(breakTime), bins: make([]atomic.Int64, herdTicks)}
	p, err := fleet[0].Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Complete(breaker.Failure)
	clock.Set(broker.recovered)
	probe, err := fleet[0].Acquire(ctx)
	if err != nil || !probe.Probe() || !probe.Complete(breaker.Success) {
		t.Fatalf("the probe after recovery did not close the shared circuit: %v", err)
	}

	run := herdRun{probes: 1}
	run.offered = rampTicks(t, clock, broker.recovered, fleetSize*perReplica, func(c int) error {
		p, err := fleet[c%fleetSize].Acquire(ctx)
		if err != nil {
			return err
		}
		defer p.Complete(breaker.Success)
		return broker.Publish(ctx, transport.Destination{})
	})
	run.broker = broker.counts()
	const all = fleetSize * perReplica
	report := checkRamp(t, policy, run, nil, all, all/50)
	t.Logf("shared fleet ramp, 1,000 callers on 8 replicas of one DynamoDB circuit, calls per 100 ms:\n%s", report)
	for i, c := range fleet {
		if s := c.Snapshot(); s.RampRefused == 0 {
			t.Errorf("replica %d refused nothing while the fleet ramped: %+v", i, s)
		}
	}
	record(result{"shared fleet ramp on DynamoDB, 2s: calls at the broker in the first 100ms", all, run.broker[0], 0, 0, 0})
}
