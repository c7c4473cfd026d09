package sharedredis

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// outage drives replicas × callers through an outage of the broker of the given
// length, one round of calls every step of the fake clock: every admitted call fails.
// It returns the calls admitted (the calls that reached the dead broker) and, of those,
// the probes.
func outage(t *testing.T, clk *fakeclock.Clock, replicas []*redisstate.Circuit, callers int, length, step time.Duration) (admitted, probes int) {
	t.Helper()
	for end := clk.Now().Add(length); clk.Now().Before(end); clk.Advance(step) {
		for _, c := range replicas {
			for range callers {
				p, err := c.Acquire(t.Context())
				if err != nil {
					continue
				}
				admitted++
				if p.Probe() {
					probes++
				}
				p.Complete(breaker.Failure)
			}
		}
	}
	return admitted, probes
}

// A Redis at maxmemory under noeviction answers reads and refuses every write (OOM).
// Without local evidence, 5 replicas × 2 callers with the broker down 8 s sent 1,424
// calls to the dead broker and never opened. Each replica keeps the refused failures
// and opens for itself: at most replicas × FailureThreshold calls plus a probe per replica per
// break, and every replica reports itself open and degraded. The same outage under
// FailClosed is measured in the same run, as the baseline.
func TestRedisAtMaxmemoryKeepsLocalEvidence(t *testing.T) {
	server := harness.NewRedis(t)
	p := sharedPolicy()
	p.BreakDuration, p.MaxBreakDuration = time.Second, 4*time.Second
	const n, callers = 5, 2
	run := func(mode sharedstate.StoreFailure) (admitted, probes int, replicas []*redisstate.Circuit) {
		e := newEnv(t, server.Addr(), "oom"+map[sharedstate.StoreFailure]string{sharedstate.KeepLocal: "local", sharedstate.FailClosed: "closed"}[mode]+":")
		if err := e.client.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		clk := fakeclock.New(time.Now())
		for range n {
			c := newCircuit(t, e, p, sharedstate.WithClock(clk), sharedstate.WithStoreFailure(mode),
				sharedstate.WithRetryDelay(500*time.Millisecond))
			acquire(t, c).Complete(breaker.Success) // the record exists and every replica has read it
			replicas = append(replicas, c)
		}
		// Full: every write is refused with OOM, reads still answer.
		for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
			if err := e.client.ConfigSet(t.Context(), kv[0], kv[1]).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.client.Set(t.Context(), e.prefix+"probe-write", "x", 0).Err(); err == nil {
			t.Fatal("a write succeeded on a Redis at maxmemory; the test cannot fill it")
		}
		admitted, probes = outage(t, clk, replicas, callers, 8*time.Second, 10*time.Millisecond)
		return admitted, probes, replicas
	}
	base, _, _ := run(sharedstate.FailClosed)
	admitted, probes, replicas := run(sharedstate.KeepLocal)
	t.Logf("calls at the dead broker over 8 s, %d replicas × %d callers: KeepLocal %d (%d probes), FailClosed %d (ratio %.3f)",
		n, callers, admitted, probes, base, float64(admitted)/float64(max(base, 1)))
	// Breaks of 1, 2 and 4 s in 8 s: at most 3 probes per replica.
	if limit := n*p.FailureThreshold + 3*n; admitted > limit || admitted-probes > n*p.FailureThreshold {
		t.Fatalf("%d calls (%d probes) reached the dead broker; want at most %d failures before opening plus 3 probes per replica", admitted, probes, n*p.FailureThreshold)
	}
	for i, c := range replicas {
		if s := c.Snapshot(); s.DegradedSince.IsZero() || s.State == breaker.Closed {
			t.Fatalf("replica %d after the outage: %+v; want open (or probing) and degraded", i, s)
		}
	}
}

// Redis restarted empty while the circuit is open: the replicas that knew it open
// write it back, and no call is admitted before the open deadline they knew (without
// the repair, 5 to 9 calls reached the dead broker and the break backoff started again).
func TestRedisRestartedEmptyKeepsOpenCircuit(t *testing.T) {
	server := harness.NewRedis(t)
	e := newEnv(t, server.Addr(), "amnesia:")
	clk := fakeclock.New(time.Now())
	p := sharedPolicy()
	var replicas []*redisstate.Circuit
	for range 5 {
		replicas = append(replicas, newCircuit(t, e, p, sharedstate.WithClock(clk)))
	}
	for range p.FailureThreshold {
		acquire(t, replicas[0]).Complete(breaker.Failure)
	}
	deadline := reject(t, replicas[0]).NotBefore
	for _, c := range replicas[1:] {
		reject(t, c)
	}
	if err := server.RestartEmpty(); err != nil {
		t.Fatal(err)
	}
	if n, err := e.client.Exists(t.Context(), replicas[0].Key()).Result(); err != nil || n != 0 {
		t.Fatalf("after the restart the key exists (%d, %v); want it gone", n, err)
	}
	admitted := 0
	clk.Advance(time.Second) // every snapshot is stale: each replica reads Redis again
	for ; clk.Now().Before(deadline); clk.Advance(100 * time.Millisecond) {
		for _, c := range replicas {
			if p, err := c.Acquire(t.Context()); err == nil {
				admitted++
				p.Complete(breaker.Failure)
			}
		}
	}
	if admitted != 0 {
		t.Fatalf("%d calls admitted before the open deadline the replicas knew; want 0", admitted)
	}
	if got, err := e.client.HGet(t.Context(), replicas[0].Key(), "state").Result(); err != nil || got != breaker.Open.String() {
		t.Fatalf("stored state after the restart %q, %v; want the open state written back", got, err)
	}
	clk.Set(deadline)
	probe := acquire(t, replicas[2])
	if !probe.Probe() {
		t.Fatal("the first call after the deadline is not a probe")
	}
	probe.Complete(breaker.Success)
}

// A private redis-server is stopped and started under a circuit. While it is down an
// open snapshot keeps rejecting until its deadline and a closed one keeps admitting
// until it is stale; after that every call fails closed with ErrUnavailable, never
// falling back to local protection, and without a request per call. When the server
// is back (with its data: it keeps an append-only file) the circuit carries on from
// the stored state.
func TestRedisStoppedThenStarted(t *testing.T) {
	server := harness.NewRedis(t)
	e := newEnv(t, server.Addr(), "outage:")
	clk := fakeclock.New(time.Now())
	c := newCircuit(t, e, sharedPolicy(), sharedstate.WithClock(clk))
	for range sharedPolicy().FailureThreshold {
		acquire(t, c).Complete(breaker.Failure)
	}
	deadline := reject(t, c).NotBefore

	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	sent := e.cmds.sent.Load()
	clk.Set(deadline.Add(-time.Millisecond))
	for range 100 {
		if nb := reject(t, c).NotBefore; !nb.Equal(deadline) {
			t.Fatalf("NotBefore %v while Redis is down; want the stored deadline %v", nb, deadline)
		}
	}
	// The aged snapshot is refreshed once (an override could have ended the break);
	// that refresh fails and the retry delay keeps the others from trying.
	if got := e.cmds.sent.Load() - sent; got > 1 {
		t.Fatalf("an open snapshot sent %d commands for 100 rejections; want at most one refresh", got)
	}
	clk.Set(deadline) // the break is over, but only Redis can hand out the fleet's probe
	unavailable(t, c)
	sent = e.cmds.sent.Load()
	for range 100 { // within RetryDelay: refused at once, Redis not asked
		unavailable(t, c)
	}
	if got := e.cmds.sent.Load() - sent; got != 0 {
		t.Fatalf("%d commands within the retry delay; want none", got)
	}

	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // RetryDelay
	probe := acquire(t, c)
	if !probe.Probe() {
		t.Fatal("after the restart the first call is not a probe: the stored open state was lost")
	}
	if !probe.Complete(breaker.Success) {
		t.Fatal("the probe's success did not count")
	}

	// A closed circuit: its fresh snapshot admits through the outage, a stale one not.
	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(800 * time.Millisecond) // the refresh fails; the snapshot is still fresh
	for range 100 {
		acquire(t, c).Complete(breaker.Success)
	}
	clk.Advance(200 * time.Millisecond) // stale: protection is unavailable, not local
	unavailable(t, c)

	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if !acquire(t, c).Complete(breaker.Failure) {
		t.Fatal("Complete(Failure) after recovery = false; want it recorded")
	}
	if got, err := e.client.HGet(t.Context(), c.Key(), "failures").Result(); err != nil || got != "1" {
		t.Fatalf("stored failures %q, %v; want 1", got, err)
	}
	if s := c.Snapshot(); s.State != breaker.Closed {
		t.Fatalf("snapshot %+v; want closed", s)
	}
}
