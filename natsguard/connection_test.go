package natsguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/natsguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// An outage of the test's own server opens the connection's circuit after
// FailureThreshold calls to one stream; from then on a stream that never failed is
// refused at once under the connection's name, with nothing sent. Once the server is
// back, the first call at the break's NotBefore is the probe: it succeeds and closes
// the connection's circuit, while the stream that failed keeps its own open circuit
// until its own probe closes it.
func TestOutageOpensTheConnectionCircuitAndARestartClosesIt(t *testing.T) {
	server := privateServer(t)
	policy := breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second}
	e := newEnv(t, server.URL(), policy, nil)
	failing, subjA := newStream(t, e.js, "a", jetstream.StreamConfig{})
	healthy, subjB := newStream(t, e.js, "b", jetstream.StreamConfig{})
	ctx := context.Background()
	for _, c := range []struct {
		d    transport.Destination
		subj func(string) string
	}{{failing, subjA}, {healthy, subjB}} {
		if err := e.p.Publish(ctx, c.d, msgs(c.subj("x"), 1)...); err != nil {
			t.Fatal(err)
		}
	}
	conn := e.p.Connection()

	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range policy.FailureThreshold {
		call, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := e.p.Publish(call, failing, msgs(subjA("x"), 1)...)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publish %d while the server is down: %v", i, err)
		}
	}
	s := e.snapshot(conn)
	if s.State != breaker.Open {
		t.Fatalf("the connection's circuit is %v after %d failures", s.State, policy.FailureThreshold)
	}
	if want := e.clock.Now().Add(policy.BreakDuration); !s.NotBefore.Equal(want) {
		t.Errorf("NotBefore %v, want the break's end %v", s.NotBefore, want)
	}
	before := e.calls(healthy)
	err := e.p.Publish(ctx, healthy, msgs(subjB("x"), 1)...)
	var rejected *registry.RejectedError
	if !errors.As(err, &rejected) || rejected.Destination != conn || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("publish to a healthy stream while the connection is open: %v, want a refusal naming %s", err, conn)
	}
	if c := e.calls(healthy); c != before {
		t.Errorf("the healthy stream's circuit counted %+v, had %+v: the refusal must come before it", c, before)
	}
	if c := e.calls(conn); c.Failed != uint64(policy.FailureThreshold) || c.Rejected != 1 {
		t.Errorf("the connection counted %+v: want %d failures and the one refusal", c, policy.FailureThreshold)
	}

	back := e.nc.StatusChanged(nats.CONNECTED)
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	<-back
	if err := e.p.Publish(ctx, healthy, msgs(subjB("x"), 1)...); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("before NotBefore: %v, want the open circuit's refusal", err)
	}
	e.clock.Set(s.NotBefore)
	if err := e.p.Publish(ctx, healthy, msgs(subjB("x"), 1)...); err != nil {
		t.Fatalf("the probe at NotBefore: %v", err)
	}
	if s := e.snapshot(conn); s.State != breaker.Closed {
		t.Fatalf("after a successful probe the connection's circuit is %v", s.State)
	}

	if s := e.snapshot(failing); s.State != breaker.Open || s.NotBefore.After(e.clock.Now()) {
		t.Fatalf("the failed stream's circuit: %v until %v; want open, due for its probe", s.State, s.NotBefore)
	}
	if err := e.p.Publish(ctx, failing, msgs(subjA("x"), 1)...); err != nil {
		t.Fatalf("the failed stream's probe: %v", err)
	}
	if s := e.snapshot(failing); s.State != breaker.Closed {
		t.Errorf("the failed stream's circuit is %v after its probe", s.State)
	}
	e.idle(failing)
	e.idle(healthy)
}

// A stream that stops answering while the server answers the others' calls fails
// its own circuit only: its timeouts are nothing to the connection's.
func TestAHungStreamIsNotTheConnections(t *testing.T) {
	policy := breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}
	e := newEnv(t, machine(t), policy, nil)
	ok, subj := newStream(t, e.js, "ok", jetstream.StreamConfig{})
	// A subject whose responder takes requests and never answers stands in for a
	// stream whose leader hangs.
	hung := natsguard.Stream(ok.Name + "HUNG")
	hungSubject := strings.ToLower(hung.Name) + ".a"
	received := make(chan struct{}, policy.FailureThreshold)
	sub, err := e.nc.Subscribe(hungSubject, func(*nats.Msg) { received <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for range policy.FailureThreshold {
		call, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- e.p.Publish(call, hung, msgs(hungSubject, 1)...) }()
		<-received // the hung call has begun; while it waits, the server answers another stream
		if err := e.p.Publish(context.Background(), ok, msgs(subj("a"), 1)...); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung stream: %v", err)
		}
		cancel()
	}
	if s := e.snapshot(hung); s.State != breaker.Open {
		t.Errorf("the hung stream's circuit is %v", s.State)
	}
	if s := e.snapshot(e.p.Connection()); s.State != breaker.Closed || s.Failures != 0 {
		t.Errorf("the connection's circuit: %v with %d failures, want closed with none", s.State, s.Failures)
	}
	if err := e.p.Publish(context.Background(), ok, msgs(subj("b"), 1)...); err != nil {
		t.Errorf("the other stream: %v", err)
	}
}
