package chaos

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/transport"
)

// hungThreshold is the failure threshold of every circuit in the hung-broker test;
// the policy's MinCallBudget is left at its default.
const hungThreshold = 5

// callerDeadline is what a request path typically gives a publish: far below the
// SDKs' own timeouts (kafka-go's 10s WriteTimeout, amqp's 5s confirm timeout, and no
// timeout at all for the AWS SDK's HTTP client).
const callerDeadline = 200 * time.Millisecond

// hungResult is one adapter's line in the hung-broker summary.
type hungResult struct {
	adapter        string
	callsToOpen    int
	timeToOpen     time.Duration // from the start of the first hung call to the open transition
	longestPublish time.Duration // the longest publish, hung or rejected
}

var (
	hungMu      sync.Mutex
	hungResults []hungResult
)

// TestHungBrokerOpensCircuit puts a TCP proxy between each client and its server and
// switches it to black-holing: it keeps accepting and reading, and never answers.
// Callers publish with 200ms deadlines and the SDKs' default timeouts; each circuit
// must open within its threshold of calls, and then reject at once.
//
// With an adaptive limit, a deadline miss counts against the broker only once it
// answers too little (registry.Outcome): once a window of the limit has closed on
// misses (four, one at a time), or a second has passed since its last success. The
// limited circuit must open within 4 × threshold calls of one caller.
func TestHungBrokerOpensCircuit(t *testing.T) {
	for _, pc := range []struct {
		name     string
		limit    admission.LimitPolicy
		maxCalls int
	}{
		{"", admission.LimitPolicy{}, hungThreshold},
		{"limited", admission.DefaultPolicy().Limit, 4 * hungThreshold},
	} {
		if pc.name != "" {
			t.Run(pc.name, func(t *testing.T) { testHungBroker(t, pc.name, pc.limit, pc.maxCalls) })
		} else {
			testHungBroker(t, pc.name, pc.limit, pc.maxCalls)
		}
	}
}

func testHungBroker(t *testing.T, policyName string, limit admission.LimitPolicy, maxCalls int) {
	for _, a := range []struct {
		name  string
		setup func(t *testing.T, reg *registry.Registry) (transport.Publisher, transport.Destination, *harness.Proxy)
	}{
		{"kafka (kfake)", hungKafka},
		{"rabbitmq", hungRabbit},
		{"sqs (test server)", hungSQS},
	} {
		t.Run(a.name, func(t *testing.T) {
			var openedAt time.Time
			var mu sync.Mutex
			reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: hungThreshold, BreakDuration: time.Minute}, Admission: admission.Policy{Limit: limit}},
				registry.WithObserver(func(_ transport.Destination, tr breaker.Transition) {
					if tr.To == breaker.Open {
						mu.Lock()
						openedAt = time.Now()
						mu.Unlock()
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			pub, d, proxy := a.setup(t, reg)
			publish := func() (time.Duration, error) {
				ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
				defer cancel()
				start := time.Now()
				err := pub.Publish(ctx, d, transport.Message{Key: []byte("k"), Value: []byte("hung?")})
				return time.Since(start), err
			}
			if _, err := publish(); err != nil { // healthy: connections and metadata in place
				t.Fatalf("publish before the hang: %v", err)
			}
			proxy.BlackHole()
			res := hungResult{adapter: a.name}
			if policyName != "" {
				res.adapter += ", " + policyName
			}
			first := time.Now()
			for res.callsToOpen < maxCalls && reg.Snapshots()[d].State == breaker.Closed {
				took, err := publish()
				res.callsToOpen++
				res.longestPublish = max(res.longestPublish, took)
				if err == nil {
					t.Fatalf("call %d to a hung broker succeeded", res.callsToOpen)
				}
			}
			if s := reg.Snapshots()[d]; s.State != breaker.Open {
				t.Fatalf("after %d hung calls the circuit is %v with %d failures", res.callsToOpen, s.State, s.Failures)
			}
			called := time.Now()
			took, err := publish()
			res.longestPublish = max(res.longestPublish, took)
			mu.Lock()
			res.timeToOpen = openedAt.Sub(first)
			sinceOpen := called.Sub(openedAt)
			mu.Unlock()
			// With the limit on, a circuit opened by missed deadlines is open for one
			// limit Window only, then takes a probe (docs/slowness.md): on a loaded
			// machine the next call may come after the Window, and be that probe.
			probe := limit.Enabled() && sinceOpen >= limit.Window && errors.Is(err, context.DeadlineExceeded)
			if !errors.Is(err, breaker.ErrOpen) && !probe {
				t.Fatalf("the call after the circuit opened: %v", err)
			}
			t.Logf("%s: open after %d calls, %v from the first hung call; longest publish %v", a.name, res.callsToOpen, res.timeToOpen.Round(time.Millisecond), res.longestPublish.Round(time.Millisecond))
			hungMu.Lock()
			hungResults = append(hungResults, res)
			hungMu.Unlock()
		})
	}
}

// hungKafka is a kafka-go writer with its default timeouts (WriteTimeout 10s,
// MaxAttempts 10) whose every dial goes through the proxy to a one-broker kfake.
func hungKafka(t *testing.T, reg *registry.Registry) (transport.Publisher, transport.Destination, *harness.Proxy) {
	topic := hungName()
	cluster := harness.KFake(t, kfake.SeedTopics(1, topic))
	proxy := harness.NewProxy(t, cluster.ListenAddrs()[0])
	tr := &kafkago.Transport{Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, proxy.Addr()) // the broker's advertised address, too
	}}
	t.Cleanup(tr.CloseIdleConnections)
	// BatchTimeout is batching, not a timeout: its 1s default would hold every
	// single-message write past the caller's deadline.
	w := &kafkago.Writer{Addr: kafkago.TCP(proxy.Addr()), Transport: tr, RequiredAcks: kafkago.RequireAll, BatchTimeout: time.Millisecond}
	pub, err := kafka.NewPublisher(w, reg, kafka.WithCloseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) }) // gives up after a second: the writer still retries
	return pub, transport.Destination{Broker: kafka.Broker, Name: topic}, proxy
}

// hungRabbit is a Manager and Publisher with their defaults (5s dial and confirm
// timeouts, 10s heartbeat) connected to the machine's RabbitMQ through the proxy.
func hungRabbit(t *testing.T, reg *registry.Registry) (transport.Publisher, transport.Destination, *harness.Proxy) {
	direct := harness.AMQPURL(t)
	exchange := hungName()
	declareRabbit(t, direct, exchange)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := harness.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	m, err := amqp.NewManager(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() }) // the hung broker never confirms the close: bounded by the dial timeout
	pub, err := amqp.NewPublisher(m, reg)
	if err != nil {
		t.Fatal(err)
	}
	return pub, amqp.Destination(exchange), proxy
}

// hungSQS is the AWS SDK's client with its defaults (no overall HTTP timeout, three
// attempts) talking to the SQS test server through the proxy.
func hungSQS(t *testing.T, reg *registry.Registry) (transport.Publisher, transport.Destination, *harness.Proxy) {
	queue := hungName()
	client, proxy := harness.ProxiedSQS(t, queue)
	pub, err := sqs.NewPublisher(client, reg)
	if err != nil {
		t.Fatal(err)
	}
	return pub, transport.Destination{Broker: sqs.Broker, Name: queue}, proxy
}

// hungName returns a destination name no other run uses.
func hungName() string { return "brokerguard-hung-" + strconv.FormatInt(time.Now().UnixNano(), 36) }
