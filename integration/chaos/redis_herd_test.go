package chaos

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// The recovery herd against one circuit shared through Redis: 20 replicas, each with
// its own client (its own connections, as separate processes would have), release
// 1,000 calls at the instant the circuit may half-open; exactly HalfOpenMaxProbes
// probes are admitted.
func TestRedisSharedCircuitHerdAdmitsExactlyMaxProbes(t *testing.T) {
	const fleet, perReplica, maxProbes = 20, 50, 3
	addr := harness.RedisAddr(t)
	prefix := harness.RedisKeyPrefix(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := fakeclock.New(time.Now())
	policy := breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second, HalfOpenMaxProbes: maxProbes,
		ProbeLease: time.Minute, Scope: breaker.SharedDependency}
	replicas := make([]breaker.Circuit, fleet)
	var first *redisstate.Circuit
	for i := range replicas {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { client.Close() })
		c, err := redisstate.New(client, "kafka:orders", policy, redisstate.WithKeyPrefix(prefix), sharedstate.WithClock(clock),
			sharedstate.WithOwner("replica-"+strconv.Itoa(i)), sharedstate.WithIOTimeout(15*time.Second)) // a loaded machine must not starve the probe writes
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = c
		first = c
	}
	p, err := first.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Complete(breaker.Failure) {
		t.Fatal("the failure did not count")
	}
	clock.Advance(10 * time.Second) // the open deadline, and every snapshot is stale
	if probes := releaseHerd(t, ctx, replicas, perReplica); probes != maxProbes {
		t.Fatalf("the fleet admitted %d probes, want exactly HalfOpenMaxProbes = %d", probes, maxProbes)
	}
	record(result{"shared herd: 1,000 calls on 20 replicas of one Redis circuit (probes admitted)", fleet * perReplica, maxProbes, 0, 0, 0})
}
