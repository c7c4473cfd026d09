package redisstate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// WithErrorHandler is told the write Permit.Complete could not make: here a failure
// that could not be counted because the client lost Redis after the permit was given.
func TestErrorHandlerHearsTheWritesCompleteCannotReturn(t *testing.T) {
	addr := harness.RedisAddr(t)
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	var mu sync.Mutex
	var heard []error
	c, err := redisstate.New(client, "errors",
		breaker.Policy{FailureThreshold: 3, BreakDuration: 10 * time.Second, Scope: breaker.SharedDependency},
		redisstate.WithKeyPrefix(harness.RedisKeyPrefix(t, addr)),
		sharedstate.WithErrorHandler(func(err error) {
			mu.Lock()
			defer mu.Unlock()
			heard = append(heard, err)
		}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Acquire(context.Background()) // reads the record while Redis answers
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	p.Complete(breaker.Failure)
	mu.Lock()
	defer mu.Unlock()
	if len(heard) == 0 || !errors.Is(heard[0], redis.ErrClosed) {
		t.Fatalf("error handler heard %v; want the failed write (%v)", heard, redis.ErrClosed)
	}
}
