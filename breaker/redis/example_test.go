package redisstate_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/registry"
)

// Every replica of a service builds the same registry: destinations whose policy has
// scope SharedDependency get a circuit shared through Redis, the others a local one.
// (It needs a Redis server, so it is compiled but not run.)
func ExampleFactory() {
	client := redis.NewClient(&redis.Options{Addr: "redis.internal:6379", ContextTimeoutEnabled: true})
	// Or a cluster: every circuit is one key, hence one hash slot.
	//   client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{...}, ContextTimeoutEnabled: true})
	shared := breaker.Policy{
		FailureThreshold: 5,
		BreakDuration:    30 * time.Second,
		Scope:            breaker.SharedDependency,
	}
	reg, err := registry.New(registry.Policy{Circuit: shared},
		registry.WithOverride("kafka:audit", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}}),
		registry.WithCircuitFactory(breaker.SharedDependency, redisstate.Factory(client,
			redisstate.WithKeyPrefix("billing:circuit:"),
			sharedstate.WithMaxStaleness(time.Second))))
	if err != nil {
		log.Fatal(err)
	}
	_ = reg // reg.Guard(publisher, classifier) ...
}

// A circuit made directly, checked against Redis at start-up.
func ExampleNew() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "redis.internal:6379", ContextTimeoutEnabled: true})
	c, err := redisstate.New(client, "pricing-service",
		breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Scope: breaker.SharedDependency})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Refresh(ctx); errors.Is(err, sharedstate.ErrPolicyMismatch) {
		log.Fatalf("another replica runs this circuit under a different policy: %v", err)
	}
	p, err := c.Acquire(ctx)
	switch {
	case errors.Is(err, breaker.ErrOpen), errors.Is(err, breaker.ErrUnavailable):
		return // defer the work; NotBefore says when to come back
	case err != nil:
		log.Fatal(err)
	}
	// ... call the dependency, then:
	p.Complete(breaker.Success)
}
