package sharedredis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/harness"
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
	runConformance(t, func(t *testing.T) string { return harness.RedisKeyPrefix(t, addr) },
		func(t *testing.T) redis.UniversalClient {
			client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { client.Close() })
			return client
		}, nil)
}

// The conformance suite on a private redis-server, which the suite may also fill
// (maxmemory 1 under noeviction: reads answer, every write is refused with OOM).
func TestConformanceOnFullRedis(t *testing.T) {
	server := harness.NewRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: server.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { admin.Close() })
	full := func(refuse bool) {
		limit := "0"
		if refuse {
			limit = "1"
		}
		for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", limit}} {
			if err := admin.ConfigSet(context.Background(), kv[0], kv[1]).Err(); err != nil {
				t.Error(err)
			}
		}
	}
	runConformance(t, func(*testing.T) string { return "full:" },
		func(t *testing.T) redis.UniversalClient {
			client := redis.NewClient(&redis.Options{Addr: server.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { client.Close() })
			return client
		}, nil, full)
}

// The conformance suite on a Redis Cluster of three masters, through cluster clients:
// each circuit is one key, so every script runs on the node that owns its slot.
func TestConformanceOnRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Redis Cluster; not run with -short")
	}
	addrs := harness.NewRedisCluster(t, 3)
	var slots sync.Map
	inspect := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { inspect.Close() })
	runConformance(t, func(*testing.T) string { return "conformance:" },
		func(t *testing.T) redis.UniversalClient {
			client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
			t.Cleanup(func() { client.Close() })
			return client
		}, func(c *redisstate.Circuit) {
			slot, err := inspect.ClusterKeySlot(t.Context(), c.Key()).Result()
			if err != nil {
				t.Error(err)
			}
			slots.Store(slot*3/16384, true) // the third of the slots, hence the node, that holds it
		})
	nodes := 0
	slots.Range(func(any, any) bool { nodes++; return true })
	if nodes < 2 {
		t.Fatalf("the suite's circuits all lived on %d node(s); want them spread over the cluster", nodes)
	}
}

// The driver's contract on a Redis Cluster of three masters, listing included: a
// listing scans every master, since the circuits' keys are spread over them.
func TestDriverOnRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Redis Cluster; not run with -short")
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: harness.NewRedisCluster(t, 3), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	var stores atomic.Int64
	circuittest.TestDriver(t, func(t *testing.T) sharedstate.Driver {
		d, err := redisstate.NewDriver(client, redisstate.WithKeyPrefix("driver-"+strconv.FormatInt(stores.Add(1), 10)+":"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

// runConformance runs circuittest on replicas with a client each (from connect) under
// the key prefix of the test. Each test of the suite has an identity of its own; made
// (when not nil) is told of every circuit.
func runConformance(t *testing.T, prefixFor func(*testing.T) string, connect func(*testing.T) redis.UniversalClient,
	made func(*redisstate.Circuit), refuseWrites ...func(bool)) {
	path := &cuttable{}
	var tests atomic.Int64
	var forget func() // deletes the running test's key, as a Redis that forgot it
	circuittest.Run(t, circuittest.Backend{
		Scope:        breaker.SharedDependency,
		Shared:       true,
		MaxStaleness: sharedstate.DefaultMaxStaleness,
		Break:        func(broken bool) { path.broken.Store(broken) },
		Forget:       func() { forget() },
		RefuseWrites: func() func(bool) {
			if len(refuseWrites) == 0 {
				return nil // a shared server is never filled
			}
			return refuseWrites[0]
		}(),
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			prefix := prefixFor(t)
			id := identity + "-" + strconv.FormatInt(tests.Add(1), 10)
			admin := connect(t)
			forget = func() {
				if err := admin.Del(context.Background(), prefix+"{"+id+"}").Err(); err != nil {
					t.Error(err)
				}
			}
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				client := connect(t)
				client.AddHook(path)
				opts := []redisstate.Option{redisstate.WithKeyPrefix(prefix), sharedstate.WithClock(cfg.Clock),
					sharedstate.WithRetryDelay(time.Millisecond), sharedstate.WithIOTimeout(10 * time.Second)}
				if cfg.Observer != nil {
					opts = append(opts, sharedstate.WithObserver(cfg.Observer))
				}
				c, err := redisstate.New(client, id, cfg.Policy, opts...)
				if err != nil {
					return nil, err
				}
				if made != nil {
					made(c)
				}
				return c, nil
			}
		},
	})
}
