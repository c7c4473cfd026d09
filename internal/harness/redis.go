package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisAddr is the address used when REDIS_ADDR is unset: the machine's server.
const DefaultRedisAddr = "127.0.0.1:6379"

const redisHint = "start it with `redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no` or set REDIS_ADDR"

// Bounds for waiting for the machine's server to start, and for a private cluster to
// form.
const (
	redisUpWait   = 15 * time.Second
	clusterUpWait = time.Minute
)

// startRedisOnce makes the harness try to start the local server at most once per test
// binary.
var startRedisOnce sync.Once

// Redis returns REDIS_ADDR (host:port, or DefaultRedisAddr) once a Redis server there
// answers PING. When REDIS_ADDR is unset and nothing listens on the default address, it
// tries once to start the machine's redis-server (nothing kept on disk) and waits up to
// 15 seconds.
func Redis() (addr string, err error) {
	addr, isDefault := envOr("REDIS_ADDR", DefaultRedisAddr)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", &UnavailableError{Service: ServiceRedis, Addr: addr, Hint: redisHint,
			Err: fmt.Errorf("harness: REDIS_ADDR must be host:port: %w", err)}
	}
	err = reach(addr, isDefault, &startRedisOnce, startLocalRedis, func() error { return waitDial(addr, redisUpWait) }, pingRedis)
	if err != nil {
		return "", &UnavailableError{Service: ServiceRedis, Addr: addr, Hint: redisHint, Err: err}
	}
	return addr, nil
}

// startLocalRedis starts the machine's redis-server on the default address, keeping
// nothing on disk. Failures are ignored: the caller's next probe reports whether the
// server came up.
func startLocalRedis() {
	ctx, cancel := context.WithTimeout(context.Background(), redisUpWait)
	defer cancel()
	_ = exec.CommandContext(ctx, "redis-server", "--daemonize", "yes", "--bind", "127.0.0.1",
		"--port", "6379", "--save", "", "--appendonly", "no",
		"--logfile", filepath.Join(os.TempDir(), "brokerguard-redis.log")).Run()
}

// pingRedis checks that the server at addr speaks Redis.
func pingRedis(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: dialTimeout, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

// RedisAddr returns the address of the shared Redis server for a test, after Require on
// Redis's error. Other tests use the same server at the same time: put every key under
// a prefix from RedisKeyPrefix.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr, err := Redis()
	Require(t, ServiceRedis, err)
	return addr
}

// RedisKeyPrefix returns a key prefix no other test uses ("bgtest:" + 16 random hex
// digits + ":") and deletes every key under it on addr when the test ends.
func RedisKeyPrefix(t testing.TB, addr string) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	prefix := "bgtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deleteKeys(ctx, addr, prefix); err != nil {
			t.Errorf("harness: delete Redis keys %s*: %v", prefix, err)
		}
	})
	return prefix
}

// deleteKeys removes every key that starts with prefix (a prefix with no glob
// characters), scanning rather than KEYS so a large server is not blocked.
func deleteKeys(ctx context.Context, addr, prefix string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		if err := c.Unlink(ctx, it.Val()).Err(); err != nil {
			return err
		}
	}
	return it.Err()
}

// RedisServer is a private redis-server child process on a fixed loopback port, for a
// test that stops and restarts Redis without touching the machine's server. It keeps
// its data in an append-only file (fsync on every write) in its directory, so Stop
// followed by Start brings back the same data on the same address. One goroutine waits
// for the process while it runs. Create one with StartRedis or NewRedis; the zero value
// is not usable.
type RedisServer struct{ server }

// NewRedis starts a private redis-server for the test (see StartRedis) and stops it when
// the test ends, whether or not the test passed. Errors go through Require.
func NewRedis(t testing.TB) *RedisServer {
	t.Helper()
	return startForTest(t, ServiceRedis, StartRedis)
}

// StartRedis starts the machine's redis-server binary on a free loopback port with its
// data in dir (a new temporary directory, removed by Close, when dir is empty) and
// waits until it accepts connections.
func StartRedis(dir string) (*RedisServer, error) {
	return startRedis(dir)
}

// startRedis starts a redis-server as StartRedis does, with extra configuration
// arguments.
func startRedis(dir string, extra ...string) (*RedisServer, error) {
	s := &RedisServer{server{dir: dir, log: "redis.log", ready: pingRedis}}
	s.fail = func(err error) error {
		return &UnavailableError{Service: ServiceRedis, Addr: s.Addr(),
			Hint: "install Debian's redis-server (scripts/services.sh does)", Err: err}
	}
	s.command = func() (*exec.Cmd, error) {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, err
		}
		return exec.Command(bin, append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
			"--dir", s.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
			"--daemonize", "no"}, extra...)...), nil
	}
	if err := startServer(&s.server, "redis-"); err != nil {
		return nil, err
	}
	return s, nil
}

// Addr returns the server's host:port.
func (s *RedisServer) Addr() string { return s.addr() }

// NewRedisCluster starts a Redis Cluster of masters private redis-servers (no
// replicas) for the test, with the hash slots spread over them, and returns their
// addresses once every node reports the cluster ok. The servers stop when the test
// ends. Errors go through Require.
func NewRedisCluster(t testing.TB, masters int) []string {
	t.Helper()
	var addrs []string
	for range masters {
		// The cluster bus gets a free port of its own: by default it is the port plus
		// 10,000, which may be taken or past 65535.
		bus, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		s, err := startRedis(t.TempDir(), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus))
		Require(t, ServiceRedis, err)
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("%v", err)
			}
		})
		addrs = append(addrs, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterUpWait)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	out, err := exec.CommandContext(ctx, "redis-cli", append(args, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		Require(t, ServiceRedis, &UnavailableError{Service: ServiceRedis, Addr: addrs[0],
			Hint: "install Debian's redis-server (it brings redis-cli)", Err: fmt.Errorf("redis-cli --cluster create: %w: %s", err, oneLine(string(out)))})
	}
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				c.Close()
				t.Fatalf("harness: Redis Cluster node %s not ok after %v: %v %s", addr, clusterUpWait, err, oneLine(info))
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return addrs
}

// RestartEmpty stops the server, removes the data it keeps (its append-only files and
// any snapshot), and starts it again on the same address: a Redis restarted without
// persistence, which has forgotten every key.
func (s *RedisServer) RestartEmpty() error {
	if err := s.Stop(); err != nil {
		return err
	}
	for _, name := range []string{"appendonlydir", "appendonly.aof", "dump.rdb"} {
		if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
			return err
		}
	}
	return s.Start()
}
