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
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/integration/harness"
)

var errCut = errors.New("the path to Redis is cut")

// cuttable refuses new connections and fails every command while broken, as a Redis
// that cannot be reached.
type cuttable struct{ broken atomic.Bool }

func (c *cuttable) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if c.broken.Load() {
			return nil, errCut
		}
		return next(ctx, network, addr)
	}
}

func (c *cuttable) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.broken.Load() {
			cmd.SetErr(errCut)
			return errCut
		}
		return next(ctx, cmd)
	}
}

func (c *cuttable) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The conformance suite on the machine's Redis: every replica has its own client.
func TestConformance(t *testing.T) {
	addr := harness.RedisAddr(t)
	path := &cuttable{}
	circuittest.Run(t, circuittest.Backend{
		Scope:        breaker.SharedDependency,
		Shared:       true,
		MaxStaleness: redisstate.DefaultMaxStateStaleness,
		Break:        func(broken bool) { path.broken.Store(broken) },
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			prefix := harness.RedisKeyPrefix(t, addr)
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				client := redis.NewClient(&redis.Options{Addr: addr})
				t.Cleanup(func() { client.Close() })
				client.AddHook(path)
				opts := []redisstate.Option{redisstate.WithKeyPrefix(prefix), redisstate.WithClock(cfg.Clock),
					redisstate.WithBackendRetryDelay(time.Millisecond), redisstate.WithIOTimeout(10 * time.Second)}
				if cfg.Observer != nil {
					opts = append(opts, redisstate.WithObserver(cfg.Observer))
				}
				return redisstate.New(client, identity, cfg.Policy, opts...)
			}
		},
	})
}
