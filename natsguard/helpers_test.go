package natsguard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/natsguard"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// counting is high enough that no row opens a circuit, and counts permits in flight
// so that a permit never completed shows.
var counting = breaker.Policy{FailureThreshold: 1000, BreakDuration: time.Minute, MaxInFlight: 100000}

// env is one test's connection, JetStream context, registry and guarded publisher.
type env struct {
	t     testing.TB
	nc    *nats.Conn
	js    jetstream.JetStream
	clock *fakeclock.Clock
	reg   *registry.Registry
	p     *natsguard.Publisher
}

// newEnv connects to url (with opts after the test's defaults), makes a registry
// with policy on a fake clock and a Publisher over them (closed when the test ends,
// before the connection).
func newEnv(t testing.TB, url string, policy breaker.Policy, jsOpts []jetstream.JetStreamOpt, opts ...nats.Option) *env {
	t.Helper()
	e := &env{t: t, clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	e.nc, e.js = connect(t, url, jsOpts, opts...)
	var err error
	if e.reg, err = registry.New(registry.Policy{Circuit: policy}, registry.WithCallCounts(), registry.WithClock(e.clock)); err != nil {
		t.Fatal(err)
	}
	if e.p, err = natsguard.NewPublisher(e.js, e.reg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// connect opens a connection to url that reconnects quickly and without end, and a
// JetStream context on it; both are closed when the test ends.
func connect(t testing.TB, url string, jsOpts []jetstream.JetStreamOpt, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond),
		nats.ReconnectJitter(0, 0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jsOpts...)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// machine returns the URL of the machine's nats-server (NATS_URL), or ends the test
// through harness.Require.
func machine(t testing.TB) string { return harness.NATSURL(t) }

// newStream creates a stream named after stem with a random part, whose subjects are
// its lower-cased name followed by ".>", with cfg's limits, and deletes it when the
// test ends. It returns the stream's destination and a subject of it for each of
// subjects.
func newStream(t testing.TB, js jetstream.JetStream, stem string, cfg jetstream.StreamConfig) (transport.Destination, func(string) string) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	cfg.Name = "BGT" + strings.ToUpper(hex.EncodeToString(b[:])) + strings.ToUpper(stem)
	prefix := strings.ToLower(cfg.Name)
	cfg.Subjects = []string{prefix + ".>"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		if !js.Conn().IsConnected() {
			return // a private server's connection the test ended: the server goes with it
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Name); err != nil {
			t.Logf("delete stream %s: %v", cfg.Name, err)
		}
	})
	return natsguard.Stream(cfg.Name), func(s string) string { return prefix + "." + s }
}

// msgs returns n messages to subject, valued "v0", "v1", ...
func msgs(subject string, n int) []transport.Message {
	out := make([]transport.Message, n)
	for i := range out {
		out[i] = transport.Message{Key: []byte(subject), Value: fmt.Appendf(nil, "v%d", i)}
	}
	return out
}

// stored returns how many messages the stream of d holds.
func stored(t testing.TB, js jetstream.JetStream, d transport.Destination) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, d.Name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// snapshot is the snapshot of d's live circuit.
func (e *env) snapshot(d transport.Destination) breaker.Snapshot {
	e.t.Helper()
	s, ok := e.reg.Snapshot(d)
	if !ok {
		e.t.Fatalf("no live circuit for %s", d)
	}
	return s
}

// calls returns the call counts of d's circuit.
func (e *env) calls(d transport.Destination) registry.CallCounts {
	for _, r := range e.reg.Report() {
		if r.Destination == d {
			return r.Calls
		}
	}
	return registry.CallCounts{}
}

// idle reports an error for d's circuit and the connection's when either still has
// permits in flight.
func (e *env) idle(d transport.Destination) {
	e.t.Helper()
	for _, dest := range []transport.Destination{d, e.p.Connection()} {
		if s, ok := e.reg.Snapshot(dest); ok && s.InFlight != 0 {
			e.t.Errorf("%s: %d permit(s) still in flight", dest, s.InFlight)
		}
	}
}

// privateServer starts a nats-server of the test's own (the tests that stop, restart
// or stall a server never touch the machine's). It skips under -short (make
// test-unit), which starts no server.
func privateServer(t testing.TB) *harness.NATSServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a nats-server of its own; skipped under -short")
	}
	return harness.NewNATSServer(t)
}
