package harness

import (
	"errors"
	"strconv"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestRedisServerStopStartKeepsData(t *testing.T) {
	server := NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: server.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), "k").Err(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("GET on a stopped server: %v; want connection refused", err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(t.Context(), "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET after restart = %q, %v; want the key kept: v", v, err)
	}
}

func TestRedisKeyPrefixCleansUp(t *testing.T) {
	addr := RedisAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	var prefix string
	t.Run("writer", func(t *testing.T) {
		prefix = RedisKeyPrefix(t, addr)
		if other := RedisKeyPrefix(t, addr); other == prefix {
			t.Fatalf("two calls gave the same prefix %q", prefix)
		}
		for _, k := range []string{"a", "{b}c", "d:e"} {
			if err := c.Set(t.Context(), prefix+k, 1, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	keys, err := c.Keys(t.Context(), prefix+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("keys under %s after the test: %q, %v; want none", prefix, keys, err)
	}
}

func TestRedisAddrFromEnvironment(t *testing.T) {
	server := NewRedis(t)
	t.Setenv("REDIS_ADDR", server.Addr())
	if got := RedisAddr(t); got != server.Addr() {
		t.Fatalf("RedisAddr = %q; want REDIS_ADDR %q", got, server.Addr())
	}
	t.Setenv("REDIS_ADDR", "no-port")
	if _, err := Redis(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis with REDIS_ADDR=no-port: %v; want ErrUnavailable naming the format", err)
	}
}

func TestRedisClusterSpreadsKeys(t *testing.T) {
	addrs := NewRedisCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	nodes := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := c.Set(t.Context(), k, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		slot, err := c.ClusterKeySlot(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		nodes[strconv.FormatInt(slot*3/16384, 10)] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("8 keys landed in %d thirds of the slots; want them spread", len(nodes))
	}
}
