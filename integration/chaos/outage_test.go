package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const idHeader = "outbox-id"

// openCalls counts, per destination, broker calls that arrived while the
// destination's circuit was open. With one dispatcher the calls to a destination are
// sequential, so the state read when a call arrives is the state that admitted it.
type openCalls struct {
	reg   *registry.Registry
	mu    sync.Mutex
	calls map[transport.Destination]int
	open  map[transport.Destination]int
}

func (o *openCalls) arrived(d transport.Destination) { o.calling(d)(nil) }

// calling reads d's state as a call to d starts, and returns what records the call
// once it ended with err: unless err says the circuit rejected it (a guarded
// publisher's own circuit), the call arrived at the broker.
func (o *openCalls) calling(d transport.Destination) func(err error) {
	c, err := o.reg.Circuit(d)
	if err != nil {
		return func(error) {}
	}
	// Open and before its deadline: a call now must be refused. (Past the deadline the
	// call's own Acquire makes it the half-open probe: the amqp publisher is guarded
	// inside, so this reads the state before its Acquire, not after.)
	s := c.Snapshot()
	open := s.State == breaker.Open && time.Now().Before(s.NotBefore)
	return func(err error) {
		if _, rejected := errors.AsType[*registry.RejectedError](err); rejected {
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		o.calls[d]++
		if open {
			o.open[d]++
		}
	}
}

// TestOutagesMidStream dispatches 20,000 rows to four destinations while RabbitMQ is
// stopped and started, kfake refuses one topic and the SQS server throttles its queue.
// Every row must end up on its broker, none dead, and no call may reach a broker while
// its destination's circuit is open (so no attempt is spent on an open circuit).
func TestOutagesMidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("the outage scenario takes about 15 seconds; it runs without -short")
	}
	ctx := context.Background()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	topicA, topicB, exchange, queue := "chaos-a-"+run, "chaos-b-"+run, "chaos-"+run, "chaos-"+run
	dests := []transport.Destination{
		{Broker: "kafka", Name: topicA}, {Broker: "kafka", Name: topicB},
		amqp.Destination(exchange), {Broker: "sqs", Name: queue},
	}

	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: 400 * time.Millisecond, Jitter: 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	watch := &openCalls{reg: reg, calls: map[transport.Destination]int{}, open: map[transport.Destination]int{}}

	// Kafka (kfake), with a switch that refuses topic B.
	cluster := harness.KFake(t, kfake.SeedTopics(1, topicA, topicB))
	var refuseB atomic.Bool
	cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		for _, rt := range req.Topics {
			watch.arrived(transport.Destination{Broker: "kafka", Name: rt.Topic})
		}
		if !refuseB.Load() || req.Topics[0].Topic != topicB {
			return nil, nil, false
		}
		return kfakeproduce.Failed(req, kfakeproduce.NotLeaderForPartition), nil, true
	})
	kpub, err := kafka.NewPublisher(&kafkago.Writer{Addr: kafkago.TCP(cluster.ListenAddrs()...), RequiredAcks: kafkago.RequireAll,
		MaxAttempts: 1, BatchTimeout: time.Millisecond, WriteTimeout: 2 * time.Second}, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer kpub.Close(ctx)

	// RabbitMQ: a durable exchange and queue, so stop_app keeps what was confirmed.
	rabbit := harness.NewRabbitNode(t) // the test stops it: never the machine's broker, whose other clients would see the outage
	amqpURL := rabbit.URL()
	declareRabbit(t, amqpURL, exchange)
	mgr, err := amqp.NewManager(amqpURL, amqp.WithRedialDelay(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	guardedAMQP, err := amqp.NewPublisher(mgr, reg, amqp.WithConfirmTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	watched := publisherFunc(func(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
		done := watch.calling(d)
		err := guardedAMQP.Publish(ctx, d, msgs...)
		done(err)
		return err
	})

	// SQS: the in-process server, with throttling switched on and off.
	srv, err := sqstest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sqsClient := awssqs.New(awssqs.Options{BaseEndpoint: aws.String(srv.URL()), Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""), HTTPClient: &http.Client{},
		RetryMaxAttempts: 1})
	if _, err := sqsClient.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(queue)}); err != nil {
		t.Fatal(err)
	}
	srv.SetBatchEntryFault(queue, func(index int, _ string) (sqstest.Fault, bool) {
		if index == 0 {
			watch.arrived(transport.Destination{Broker: "sqs", Name: queue})
		}
		return sqstest.Fault{}, false
	})
	spub, err := sqs.NewPublisher(sqsClient, reg)
	if err != nil {
		t.Fatal(err)
	}

	pub := routes{"kafka": kpub, "amqp": watched, "sqs": spub}

	// The outbox on PostgreSQL, one dispatcher.
	store, pool, _ := outboxOnPostgres(t)
	var failedReported atomic.Int64
	classify := func(err error) breaker.Outcome {
		return transport.Worst(kafka.Classify(err), amqp.Classify(err), sqs.Classify(err))
	}
	proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithClassifier(classify), outbox.WithIDHeader(idHeader), outbox.WithBatchSize(250),
		outbox.WithPollInterval(10*time.Millisecond), outbox.WithMaxAttempts(1000), outbox.WithDeferralJitter(50*time.Millisecond),
		outbox.WithRejectedDelay(100*time.Millisecond), outbox.WithLease(time.Minute),
		outbox.WithBackoff(outbox.Backoff{Initial: 20 * time.Millisecond, Max: 300 * time.Millisecond, Multiplier: 2, Jitter: 0.2}),
		outbox.WithHooks(hookFunc(func(_ transport.Destination, _, _, failed, _ int) { failedReported.Add(int64(failed)) })),
		outbox.WithErrorHandler(func(err error) { t.Logf("dispatcher: %v", err) }))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// 20,000 rows over eight seconds, so that every fault lands mid-stream.
	const total = 20_000
	start := time.Now()
	var ids []int64
	var produced sync.WaitGroup
	produced.Go(func() {
		for batch := range 80 {
			entries := make([]outbox.Entry, total/80)
			for i := range entries {
				entries[i] = outbox.Entry{Destination: dests[(batch*len(entries)+i)%len(dests)],
					Message: transport.Message{Key: []byte(strconv.Itoa(i % 8)), Value: fmt.Appendf(nil, "row %d/%d", batch, i)}}
			}
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				got, err := store.Enqueue(ctx, postgres.Pgx(tx), entries...)
				ids = append(ids, got...)
				return err
			})
			if err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond) // a steady producer, not a bulk load
		}
	})

	at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }
	at(1 * time.Second)
	refuseB.Store(true)
	srv.SetFault(queue, sqstest.ThrottlingException)
	at(1500 * time.Millisecond)
	rabbit.StopApp(t)
	at(3500 * time.Millisecond)
	refuseB.Store(false)
	srv.ClearFault(queue)
	at(4500 * time.Millisecond)
	rabbit.StartApp(t)
	produced.Wait()

	// Drain: every row settles.
	deadline := time.Now().Add(60 * time.Second)
	for {
		pending, _, err := store.Backlog(ctx)
		if err == nil && pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows still pending a minute after the producer stopped", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)

	// Nothing lost, none dead, every attempt a real broker failure.
	byDest := map[transport.Destination]map[string]bool{}
	var attempts, deferred int64
	for _, id := range ids {
		r, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != outbox.StatusPublished {
			t.Fatalf("row %d is %s (%s)", id, r.Status, r.LastError)
		}
		if byDest[r.Destination] == nil {
			byDest[r.Destination] = map[string]bool{}
		}
		byDest[r.Destination][strconv.FormatInt(id, 10)] = true
		attempts += int64(r.Attempts)
		deferred += int64(r.Deferrals)
	}
	if attempts != failedReported.Load() {
		t.Errorf("rows hold %d attempts but the dispatcher reported %d failed publishes", attempts, failedReported.Load())
	}
	watch.mu.Lock()
	for d, n := range watch.open {
		t.Errorf("%d calls reached %s while its circuit was open", n, d)
	}
	watch.mu.Unlock()
	if deferred == 0 {
		t.Error("no row was ever deferred: the outages did not open any circuit")
	}

	onBroker := map[transport.Destination]map[string]int{}
	onBroker[dests[0]] = kafkaIDs(t, cluster, topicA)
	onBroker[dests[1]] = kafkaIDs(t, cluster, topicB)
	onBroker[dests[2]] = rabbitIDs(t, amqpURL, exchange)
	onBroker[dests[3]] = sqsIDs(srv, queue)
	var delivered, duplicates int
	for _, d := range dests {
		for id := range byDest[d] {
			n := onBroker[d][id]
			if n == 0 {
				t.Errorf("%s: row %s was marked published but is not on the broker", d, id)
			}
			delivered += min(n, 1)
			duplicates += max(n-1, 0)
		}
	}
	t.Logf("%d deferrals, %d attempts (every one a real broker failure)", deferred, attempts)
	record(result{"outages mid-stream: 2 Kafka topics, RabbitMQ, SQS", len(ids), delivered, duplicates, len(ids) - delivered, elapsed})
	if len(ids) != total || delivered != total {
		t.Fatalf("%d rows enqueued, %d delivered; want %d and %d", len(ids), delivered, total, total)
	}
}

// routes sends each destination to its broker's publisher.
type routes map[string]transport.Publisher

func (r routes) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return r[d.Broker].Publish(ctx, d, msgs...)
}

type hookFunc func(d transport.Destination, published, deferred, failed, dead int)

func (f hookFunc) RecordDispatch(d transport.Destination, published, deferred, failed, dead int) {
	f(d, published, deferred, failed, dead)
}

// rabbitChannel opens a connection and a channel to url, closed when the test ends.
func rabbitChannel(t *testing.T, url string) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// declareRabbit declares a durable fanout exchange and a durable queue bound to it,
// both named name, and deletes them when the test ends.
func declareRabbit(t *testing.T, url, name string) {
	t.Helper()
	ch := rabbitChannel(t, url)
	if err := ch.ExchangeDeclare(name, "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(name, "", name, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if conn, err := amqp091.Dial(url); err == nil { // the broker was restarted since
			defer conn.Close()
			if ch, err := conn.Channel(); err == nil {
				ch.QueueDelete(name, false, false, false)
				ch.ExchangeDelete(name, false, false)
			}
		}
	})
}

// rabbitIDs drains the queue and counts the copies of each outbox id.
func rabbitIDs(t *testing.T, url, queue string) map[string]int {
	t.Helper()
	ch := rabbitChannel(t, url)
	ids := map[string]int{}
	for {
		m, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return ids
		}
		switch v := m.Headers[idHeader].(type) { // the adapter sends header values as bytes
		case []byte:
			ids[string(v)]++
		case string:
			ids[v]++
		}
	}
}

// kafkaIDs reads a topic from the start and counts the copies of each outbox id.
func kafkaIDs(t *testing.T, cluster *kfake.Cluster, topic string) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ids := map[string]int{}
	idle := 0
	for idle < 3 { // three empty fetches in a row: the topic is read
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		f := cl.PollFetches(ctx)
		cancel()
		n := 0
		f.EachRecord(func(r *kgo.Record) {
			n++
			for _, h := range r.Headers {
				if h.Key == idHeader {
					ids[string(h.Value)]++
				}
			}
		})
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	return ids
}

func sqsIDs(srv *sqstest.Server, queue string) map[string]int {
	ids := map[string]int{}
	for _, m := range srv.Messages(queue) {
		if a, ok := m.Attributes[idHeader]; ok {
			ids[a.StringValue]++
		}
	}
	return ids
}

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
