// Package amqp_test runs package amqp against the machine's RabbitMQ (AMQP_URL
// overrides it): round trips, every row of amqp.Classify produced by the broker, the
// connection manager through a broker outage, and a guarded-versus-raw benchmark.
package amqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// unique returns a name no other test run uses.
func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "brokerguard-test-" + prefix + "-" + hex.EncodeToString(b)
}

// admin opens a plain connection and channel for declaring and inspecting topology,
// closed in cleanup.
func admin(t testing.TB, url string) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// declareQueue declares a transient queue bound to exchange (when not "") with key, deleted in
// cleanup on a connection of its own (the test may have broken the channel).
func declareQueue(t testing.TB, url, exchange, key string, args amqp091.Table) string {
	t.Helper()
	ch := admin(t, url)
	q := unique("q")
	if _, err := ch.QueueDeclare(q, false, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	cleanup(t, url, func(ch *amqp091.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
	if exchange != "" {
		if err := ch.QueueBind(q, key, exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// declareExchange declares a durable exchange (it survives a broker restart), deleted
// in cleanup.
func declareExchange(t testing.TB, url, kind string, internal bool) string {
	t.Helper()
	ch := admin(t, url)
	x := unique("x")
	if err := ch.ExchangeDeclare(x, kind, true, false, internal, false, nil); err != nil {
		t.Fatal(err)
	}
	cleanup(t, url, func(ch *amqp091.Channel) error { return ch.ExchangeDelete(x, false, false) })
	return x
}

// cleanup runs f on a fresh channel when the test ends.
func cleanup(t testing.TB, url string, f func(*amqp091.Channel) error) {
	t.Cleanup(func() {
		conn, err := amqp091.Dial(url)
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err == nil {
			err = f(ch)
		}
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
}

// setup is a manager, a registry and a publisher guarded by it.
type setup struct {
	url string
	m   *amqp.Manager
	reg *registry.Registry
	raw *amqp.Publisher
	pub transport.Publisher
}

// newSetup builds a setup whose manager and publisher are closed in cleanup.
func newSetup(t testing.TB, url string, policy breaker.Policy, mopts []amqp.ManagerOption, popts ...amqp.PublisherOption) *setup {
	t.Helper()
	m, err := amqp.NewManager(url, mopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	reg := registryWith(t, policy)
	// raw publishes on the same connection under circuits that never open, for the
	// steps that must reach the broker whatever reg's circuits say.
	pub, raw := publisherOn(t, m, reg, popts), publisherOn(t, m, registryWith(t, breaker.Policy{FailureThreshold: 1 << 30, BreakDuration: time.Second}), popts)
	return &setup{url: url, m: m, reg: reg, raw: raw, pub: pub}
}

// newRegistry is a registry whose circuits open after 5 failures in a row for a
// minute.
func newRegistry(t testing.TB) *registry.Registry {
	return registryWith(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute})
}

func registryWith(t testing.TB, p breaker.Policy) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Policy{Circuit: p})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// publisherOn is a publisher over m and reg, closed in cleanup.
func publisherOn(t testing.TB, m *amqp.Manager, reg *registry.Registry, opts []amqp.PublisherOption) *amqp.Publisher {
	t.Helper()
	pub, err := amqp.NewPublisher(m, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

var defaultPolicy = breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}

// get takes one message from q, failing the test when there is none.
func get(t testing.TB, ch *amqp091.Channel, q string) amqp091.Delivery {
	t.Helper()
	d, ok, err := ch.Get(q, true)
	if err != nil || !ok {
		t.Fatalf("get from %s: ok=%v, %v", q, ok, err)
	}
	return d
}

// closeConnection makes the broker close conn with 320 CONNECTION_FORCED, as
// `rabbitmqctl close_connection` does; only this test's connection is closed, so that
// other packages' tests on the shared broker are not disturbed (close_all_connections
// would close theirs too).
func closeConnection(t testing.TB, conn *amqp091.Connection) {
	t.Helper()
	out, err := harness.RabbitCtl(t, "-q", "--no-table-headers", "list_connections", "pid", "name")
	if err != nil {
		t.Fatal(err)
	}
	local := conn.LocalAddr().String() + " -> "
	for line := range strings.SplitSeq(out, "\n") {
		pid, name, ok := strings.Cut(line, "\t")
		if ok && strings.HasPrefix(name, local) {
			if _, err := harness.RabbitCtl(t, "close_connection", pid, "brokerguard test"); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("connection from %s not in list_connections:\n%s", local, out)
}

// waitFor polls cond every 20ms until it holds, failing the test after limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goroutinesBack waits until no more goroutines run than before.
func goroutinesBack(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Timeouts for tests that need a publisher's or a Manager's own bound short enough to
// wait out against a held broker, but that also let healthy calls run under it: a
// loaded CI machine (race detector, a RabbitMQ sharing two cores) missed 200ms for
// a channel's opening and confirm, and a dial bounds the whole AMQP handshake.
const (
	roomyConfirmTimeout = 2 * time.Second
	roomyDialTimeout    = 2 * time.Second
)

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// newProxy puts a harness.Proxy between the test and amqpURL's broker and returns it
// with the URL that goes through it.
func newProxy(t testing.TB, amqpURL string) (*harness.Proxy, string) {
	t.Helper()
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	p := harness.NewProxy(t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}
