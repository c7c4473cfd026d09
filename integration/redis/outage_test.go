package sharedredis

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
)

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
