package dynamo_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/registry"
)

// awsConfig stands for the application's AWS configuration, loaded with
// config.LoadDefaultConfig.
var awsConfig aws.Config

// Every replica of a service builds the same registry: destinations whose policy has
// scope SharedDependency get a circuit shared through the table, the others a local
// one. (It needs AWS, so it is compiled but not run.)
func ExampleFactory() {
	ctx := context.Background()
	client := dynamodb.NewFromConfig(awsConfig)
	if err := dynamo.CreateTable(ctx, client, "brokerguard-circuits"); err != nil {
		log.Fatal(err)
	}
	shared := breaker.Policy{
		FailureThreshold: 5,
		BreakDuration:    30 * time.Second,
		Scope:            breaker.SharedDependency,
	}
	reg, err := registry.New(registry.Policy{Circuit: shared},
		registry.WithOverride("kafka:audit", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}}),
		registry.WithCircuitFactory(breaker.SharedDependency, dynamo.Factory(client, "brokerguard-circuits",
			sharedstate.WithIdentityPrefix("billing/"),
			sharedstate.WithMaxStaleness(time.Second))))
	if err != nil {
		log.Fatal(err)
	}
	_ = reg // reg.Guard(publisher, classifier) ...
}

// A circuit made directly, checked against the table at start-up.
func ExampleNew() {
	ctx := context.Background()
	c, err := dynamo.New(dynamodb.NewFromConfig(awsConfig), "brokerguard-circuits", "pricing-service",
		breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Scope: breaker.SharedDependency})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Refresh(ctx); errors.Is(err, dynamo.ErrFingerprintMismatch) {
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
