// Package sharedredis tests breaker/redis (package redisstate) against real Redis
// servers: the machine's (REDIS_ADDR, default 127.0.0.1:6379) under a key prefix of
// each test's own, and private redis-servers that a test stops and starts.
package sharedredis

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// commands counts what a client sends: the commands it is asked to run (once each,
// however often go-redis retries one) and the connections it dials.
type commands struct {
	sent, dials atomic.Int64
}

func (c *commands) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.sent.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.sent.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// env is a test's client (counting its commands) and key prefix on one Redis.
type env struct {
	client *redis.Client
	cmds   *commands
	prefix string
}

// newEnv returns a counting client of addr with short timeouts, so that a stopped
// server fails a request quickly; it is closed when the test ends.
func newEnv(t testing.TB, addr, prefix string) env {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	cmds := &commands{}
	client.AddHook(cmds)
	return env{client: client, cmds: cmds, prefix: prefix}
}

// setup returns an env on the machine's Redis under a fresh key prefix.
func setup(t testing.TB) env {
	t.Helper()
	addr := harness.RedisAddr(t)
	return newEnv(t, addr, harness.RedisKeyPrefix(t, addr))
}

const identity = "kafka:orders"

func sharedPolicy() breaker.Policy {
	return breaker.Policy{
		FailureThreshold:   3,
		BreakDuration:      10 * time.Second,
		ProbeLease:         5 * time.Second,
		HalfOpenRetryDelay: time.Second,
		Scope:              breaker.SharedDependency,
	}
}

func newCircuit(t testing.TB, e env, p breaker.Policy, opts ...redisstate.Option) *redisstate.Circuit {
	t.Helper()
	c, err := redisstate.New(e.client, identity, p, append([]redisstate.Option{redisstate.WithKeyPrefix(e.prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func acquire(t *testing.T, c *redisstate.Circuit) breaker.Permit {
	t.Helper()
	p, err := c.Acquire(t.Context())
	if err != nil {
		t.Fatalf("Acquire: %v; want a permit", err)
	}
	return p
}

func reject(t *testing.T, c *redisstate.Circuit) *breaker.OpenError {
	t.Helper()
	_, err := c.Acquire(t.Context())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) || oe.Scope != breaker.SharedDependency || oe.Identity != identity {
		t.Fatalf("Acquire = %v; want a shared *OpenError for %s", err, identity)
	}
	return oe
}

func unavailable(t *testing.T, c *redisstate.Circuit) *redisstate.UnavailableError {
	t.Helper()
	_, err := c.Acquire(t.Context())
	var ue *redisstate.UnavailableError
	if !errors.Is(err, breaker.ErrUnavailable) || !errors.As(err, &ue) || ue.Identity != identity || ue.Key != c.Key() {
		t.Fatalf("Acquire = %v; want an *UnavailableError naming %s", err, c.Key())
	}
	return ue
}
