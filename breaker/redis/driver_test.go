package redisstate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/redis/go-redis/v9"
)

// testDriver returns a driver on the machine's Redis under a key prefix of the test's
// own, and a client for looking at its keys.
func testDriver(t *testing.T, opts ...redisstate.Option) (*redisstate.Driver, *redis.Client) {
	t.Helper()
	addr := harness.RedisAddr(t)
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	opts = append([]redisstate.Option{redisstate.WithKeyPrefix(harness.RedisKeyPrefix(t, addr))}, opts...)
	d, err := redisstate.NewDriver(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return d, client
}

// A closed record whose version and generation are creation times, as the engine
// writes them: larger than 2^53, so a script that compared them as Lua numbers would
// confuse neighbours.
func closedRecord(gen uint64) sharedstate.Record {
	return sharedstate.Record{Version: gen, Fingerprint: "fp1", Policy: "FailureThreshold=3",
		State: breaker.Closed, Generation: gen, Reason: "created", Since: 42}
}

const bigGen = uint64(1)<<62 + 1

// The contract of every storage driver, on the machine's Redis.
func TestDriverConformance(t *testing.T) {
	circuittest.TestDriver(t, func(t *testing.T) sharedstate.Driver {
		d, _ := testDriver(t)
		return d
	})
}

// lossyConn drops the reply to the next command while armed: it reads the server's
// answer, then reports a closed connection, as when a connection dies after the server
// acted. go-redis then sends the command again on a new connection.
type lossyConn struct {
	net.Conn
	armed *atomic.Bool
	wrote bytes.Buffer
}

func (c *lossyConn) Write(p []byte) (int, error) {
	c.wrote.Write(p)
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err == nil && bytes.Contains(bytes.ToLower(c.wrote.Bytes()), []byte("evalsha")) && c.armed.CompareAndSwap(true, false) {
		c.Conn.Close()
		return 0, io.ErrUnexpectedEOF
	}
	c.wrote.Reset()
	return n, err
}

// A write whose reply is lost is sent again by go-redis; it must count once and be
// reported as done, not applied twice nor reported as a conflict (which would tell the
// engine that nothing was written).
func TestWriteSentTwiceAppliesOnce(t *testing.T) {
	addr := harness.RedisAddr(t)
	var armed atomic.Bool
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: 3, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: c, armed: &armed}, nil
		}})
	t.Cleanup(func() { client.Close() })
	d, err := redisstate.NewDriver(client, redisstate.WithKeyPrefix(harness.RedisKeyPrefix(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const id = "amqp:events"
	if _, err := d.Load(ctx, id); !errors.Is(err, sharedstate.ErrNotFound) { // loads the scripts' connection
		t.Fatal(err)
	}
	armed.Store(true)
	if err := d.Replace(ctx, id, 0, closedRecord(bigGen)); err != nil {
		t.Fatalf("Replace whose first reply was lost: %v; want done", err)
	}
	if armed.Load() {
		t.Fatal("no reply was dropped: the test did not test anything")
	}
	armed.Store(true)
	r, err := d.AddFailure(ctx, id, sharedstate.Closed{Generation: bigGen, Fingerprint: "fp1", Limit: 5})
	if err != nil || r.Failures != 1 || r.Version != bigGen+1 {
		t.Fatalf("AddFailure whose first reply was lost = %+v, %v; want one failure counted once", r, err)
	}
	if armed.Load() {
		t.Fatal("no reply was dropped")
	}
}

func TestKeyAndTimeToLive(t *testing.T) {
	d, client := testDriver(t, redisstate.WithTTL(time.Hour))
	ctx := t.Context()
	key := d.Key("kafka:orders")
	if want := "{kafka:orders}"; len(key) < len(want) || key[len(key)-len(want):] != want {
		t.Fatalf("Key = %q; want the identity in a hash tag at the end", key)
	}
	if err := d.Replace(ctx, "kafka:orders", 0, closedRecord(bigGen)); err != nil {
		t.Fatal(err)
	}
	ttl := func() time.Duration {
		t.Helper()
		d, err := client.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if got := ttl(); got <= 59*time.Minute || got > time.Hour {
		t.Fatalf("TTL after a write = %v; want about an hour", got)
	}
	if err := client.PExpire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(ctx, "kafka:orders"); err != nil {
		t.Fatal(err)
	}
	if got := ttl(); got <= 59*time.Minute {
		t.Fatalf("TTL after a read = %v; want it extended to about an hour", got)
	}
	open := closedRecord(bigGen)
	open.Version, open.State, open.Generation = bigGen+1, breaker.Open, bigGen+1
	open.OpenUntil = time.Now().Add(5 * time.Hour).UnixNano()
	if err := d.Replace(ctx, "kafka:orders", bigGen, open); err != nil {
		t.Fatal(err)
	}
	if got := ttl(); got <= 5*time.Hour+59*time.Minute {
		t.Fatalf("TTL of a circuit open for 5 hours = %v; want past the deadline by the TTL", got)
	}
	if _, err := d.Load(ctx, "kafka:orders"); err != nil {
		t.Fatal(err)
	}
	if got := ttl(); got <= 5*time.Hour {
		t.Fatalf("TTL after a read = %v; a read must never shorten it", got)
	}
}

func TestCorruptRecordsAreNamed(t *testing.T) {
	d, client := testDriver(t)
	ctx := t.Context()
	for _, c := range []struct {
		name, field string
		value       any
	}{
		{"no JSON", "record", "{"},
		{"version not a number", "version", "x"},
		{"negative failures", "failures", "-1"},
		{"state copy differs", "state", "open"},
		{"generation copy differs", "generation", "12"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "kafka:" + c.name
			if err := d.Replace(ctx, id, 0, closedRecord(bigGen)); err != nil {
				t.Fatal(err)
			}
			if err := client.HSet(ctx, d.Key(id), c.field, c.value).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := d.Load(ctx, id)
			var re *redisstate.RecordError
			if !errors.As(err, &re) || !errors.Is(err, redisstate.ErrCorruptRecord) || !errors.Is(err, sharedstate.ErrCorrupt) || re.Field != c.field || re.Key != d.Key(id) {
				t.Fatalf("Load = %v; want a *RecordError naming key %s and field %s", err, d.Key(id), c.field)
			}
		})
	}
	if err := client.HSet(ctx, d.Key("bare"), "state", "closed").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(ctx, "bare"); !errors.Is(err, redisstate.ErrCorruptRecord) {
		t.Fatalf("Load of a hash without a record: %v; want ErrCorruptRecord", err)
	}
}

func TestNewDriverRefusesBadOptions(t *testing.T) {
	if _, err := redisstate.NewDriver(nil); err == nil {
		t.Error("NewDriver(nil) succeeded")
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()
	if _, err := redisstate.NewDriver(client, redisstate.WithTTL(time.Millisecond)); err == nil {
		t.Error("a TTL of one millisecond was accepted")
	}
	// A client that ignores its context's deadline waits its ReadTimeout on a hung
	// server, past the circuit's I/O timeout and the caller's deadline.
	for name, c := range map[string]redis.Scripter{
		"Client":        redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		"ClusterClient": redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
		"Ring":          redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}),
	} {
		defer c.(io.Closer).Close()
		if _, err := redisstate.NewDriver(c); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
			t.Errorf("%s without ContextTimeoutEnabled: %v; want an error naming the option", name, err)
		}
	}
}

// A hung Redis (it reads and never answers) fails a request at its context's
// deadline, not after the client's ReadTimeout: what the refusal above is for.
func TestHungServerFailsAtTheDeadline(t *testing.T) {
	addr := harness.RedisAddr(t)
	proxy := harness.NewProxy(t, addr)
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	t.Cleanup(func() { client.Close() })
	d, err := redisstate.NewDriver(client, redisstate.WithKeyPrefix(harness.RedisKeyPrefix(t, addr)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(t.Context(), "kafka:orders"); !errors.Is(err, sharedstate.ErrNotFound) {
		t.Fatal(err)
	}
	proxy.BlackHole()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := d.Load(ctx, "kafka:orders")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Load from a hung server succeeded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Load from a hung server ignored its 100ms deadline (ReadTimeout is a minute)")
	}
}

// A key inflated by someone with write access to Redis is refused by its size, before
// any of it is decoded (a 36 MiB record would make each replica allocate 200 MiB and
// miss its deadline). The hash's other fields, and the write tokens every script
// reads, are bounded the same way.
func TestOversizedRecordsAreRefusedBeforeDecoding(t *testing.T) {
	d, client := testDriver(t)
	ctx := t.Context()
	// A valid record with far too many leases: about 2 MiB of JSON.
	huge := closedRecord(bigGen)
	huge.State = breaker.HalfOpen
	for i := range 30000 {
		huge.Leases = append(huge.Leases, sharedstate.Lease{ID: uint64(i + 1), Owner: "host/1/abc", Expires: 1 << 60})
	}
	raw, err := json.Marshal(huge)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, field, value string }{
		{"record", "record", string(raw)},
		{"fingerprint", "fingerprint", strings.Repeat("f", 2<<20)},
		{"write tokens", "ops", strings.Repeat("0", 2<<20)},
		{"unknown field", "padding", strings.Repeat("p", 2<<20)},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "kafka:big-" + c.field
			if err := d.Replace(ctx, id, 0, closedRecord(bigGen)); err != nil {
				t.Fatal(err)
			}
			if err := client.HSet(ctx, d.Key(id), c.field, c.value).Err(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Del(ctx, d.Key(id)) })
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := d.Load(ctx, id)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			if c.field == "padding" || c.field == "ops" {
				// A field the driver does not read (or bounds in the script) costs it nothing.
				r, err := d.Load(ctx, id)
				if err != nil {
					t.Fatalf("Load with a large %s field: %v", c.field, err)
				}
				next := r
				next.Version, next.Failures = r.Version+1, 1
				if err := d.Replace(ctx, id, r.Version, next); err != nil {
					t.Fatalf("Replace with a large %s field: %v", c.field, err)
				}
			} else {
				var re *redisstate.RecordError
				if !errors.As(err, &re) || !errors.Is(err, sharedstate.ErrCorrupt) || re.Field != c.field ||
					!strings.Contains(re.Reason, "bytes") {
					t.Fatalf("Load of a key with a %d-byte %s: %v; want a *RecordError naming the field's size", len(c.value), c.field, err)
				}
			}
			if allocated > 1<<20 {
				t.Fatalf("Load allocated %d bytes for a %d-byte field; want it refused before reading", allocated, len(c.value))
			}
		})
	}
}
