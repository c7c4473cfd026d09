package chaos

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// The recovery herd against one shared circuit: a fleet of replicas, all released at
// the instant the circuit may half-open, admits exactly HalfOpenMaxProbes probes.
func TestSharedCircuitHerdAdmitsExactlyMaxProbes(t *testing.T) {
	const fleet, perReplica, maxProbes = 20, 50, 3
	endpoint := harness.Dynalite(t)
	client := harness.DynamoDBClient(endpoint)
	table := harness.DynamoDBTable(t, client, "chaos-herd-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := fakeclock.New(time.Now())
	policy := breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second, HalfOpenMaxProbes: maxProbes,
		ProbeLease: time.Minute, Scope: breaker.SharedDependency}
	replicas := make([]*dynamo.Circuit, fleet)
	for i := range replicas {
		c, err := dynamo.New(client, table, "kafka:orders", policy, sharedstate.WithClock(clock),
			sharedstate.WithOwner("replica-"+strconv.Itoa(i)), sharedstate.WithIOTimeout(15*time.Second)) // a loaded machine must not starve the probe writes
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = c
	}
	p, err := replicas[0].Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Complete(breaker.Failure) {
		t.Fatal("the failure did not count")
	}
	clock.Advance(10 * time.Second) // the open deadline, and every snapshot is stale

	circuits := make([]breaker.Circuit, len(replicas))
	for i, c := range replicas {
		circuits[i] = c
	}
	if probes := releaseHerd(t, ctx, circuits, perReplica); probes != maxProbes {
		t.Fatalf("the fleet admitted %d probes, want exactly HalfOpenMaxProbes = %d", probes, maxProbes)
	}
	record(result{"shared herd: 1,000 calls on 20 replicas of one DynamoDB circuit (probes admitted)", fleet * perReplica, maxProbes, 0, 0, 0})
}

// releaseHerd releases perReplica goroutines on each replica of one shared circuit at
// once, each making one Acquire, and returns how many probes were admitted. Probes are
// held, not completed: a second wave of probes would be a herd. Any admission that is
// not a probe, or an error other than a rejection or an unavailable store, fails t.
func releaseHerd(t *testing.T, ctx context.Context, replicas []breaker.Circuit, perReplica int) int {
	var probes, rejected, unavailable atomic.Int64
	var start sync.WaitGroup
	start.Add(1)
	var wg sync.WaitGroup
	for i, c := range replicas {
		for range perReplica {
			wg.Go(func() {
				start.Wait()
				p, err := c.Acquire(ctx)
				switch {
				case err == nil && p.Probe():
					probes.Add(1)
				case err == nil:
					t.Errorf("replica %d admitted a call that is not a probe", i)
				case errors.Is(err, breaker.ErrOpen):
					rejected.Add(1)
				case errors.Is(err, breaker.ErrUnavailable):
					unavailable.Add(1)
				default:
					t.Errorf("replica %d: %v", i, err)
				}
			})
		}
	}
	start.Done()
	wg.Wait()
	t.Logf("%d goroutines: %d probes, %d rejected, %d could not reach the store",
		len(replicas)*perReplica, probes.Load(), rejected.Load(), unavailable.Load())
	return int(probes.Load())
}
