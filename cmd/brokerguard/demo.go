package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	amqp091 "github.com/rabbitmq/amqp091-go"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// idHeader carries the outbox row id on every published message, so the broker side
// can be counted without double-counting at-least-once redeliveries.
const idHeader = "outbox-id"

// counts is what the dispatcher did for one destination; it implements outbox.Hooks.
type counts struct {
	mu sync.Mutex
	// published, holds, failed, dead. holds counts the batches the dispatcher gave back
	// uncharged because the destination was unavailable, each time holding it: one per
	// hold, however many rows wait behind it (held rows are not claimed, so they are not
	// counted one by one).
	by    map[transport.Destination]*[4]int64
	inner outbox.Hooks // telemetry, when --metrics is set
}

func (c *counts) RecordDispatch(d transport.Destination, published, deferred, failed, dead int) {
	c.mu.Lock()
	n := c.by[d]
	if n == nil {
		n = new([4]int64)
		c.by[d] = n
	}
	n[0] += int64(published)
	if deferred > 0 {
		n[1]++
	}
	n[2] += int64(failed)
	n[3] += int64(dead)
	c.mu.Unlock()
	if c.inner != nil {
		c.inner.RecordDispatch(d, published, deferred, failed, dead)
	}
}

func (c *counts) get(d transport.Destination) [4]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.by[d]; n != nil {
		return *n
	}
	return [4]int64{}
}

// router sends each destination to its broker's publisher.
type router map[string]transport.Publisher

func (r router) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	p, ok := r[d.Broker]
	if !ok {
		return fmt.Errorf("demo: no publisher for broker %q", d.Broker)
	}
	return p.Publish(ctx, d, msgs...)
}

// classify tells the outbox an outage (a Failure by any adapter's table) from a
// message's own failure.
func classify(err error) breaker.Outcome {
	return transport.Worst(kafka.Classify(err), amqp.Classify(err), sqs.Classify(err))
}

// store is the outbox store with the two calls the demo makes besides the Store contract.
type store interface {
	outbox.Store
	BacklogByDestination(ctx context.Context) ([]outbox.DestinationBacklog, error)
	enqueue(ctx context.Context, entries []outbox.Entry) ([]int64, error)
	status(ctx context.Context, id int64) (outbox.Status, error)
}

type memoryStore struct{ *memory.Store }

func (m memoryStore) enqueue(ctx context.Context, entries []outbox.Entry) ([]int64, error) {
	return m.Enqueue(ctx, entries...)
}

func (m memoryStore) status(_ context.Context, id int64) (outbox.Status, error) {
	r, ok := m.Get(id)
	if !ok {
		return "", fmt.Errorf("demo: row %d is missing", id)
	}
	return r.Status, nil
}

type postgresStore struct {
	*postgres.Store
	pool *pgxpool.Pool
}

func (p postgresStore) enqueue(ctx context.Context, entries []outbox.Entry) (ids []int64, err error) {
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		ids, err = p.Enqueue(ctx, postgres.Pgx(tx), entries...)
		return err
	})
	return ids, err
}

func (p postgresStore) status(ctx context.Context, id int64) (outbox.Status, error) {
	r, err := p.Get(ctx, id)
	return r.Status, err
}

// demoRun is one run of the demo: what its steps set up and share. Every step is a
// method; demo calls them in order.
type demoRun struct {
	c       config
	out     io.Writer // the screen: every line goes above the live table
	scr     *screen
	closers []func() // run in reverse order when the demo ends
	start   time.Time

	// Kafka: in-process (cluster set, outage switched by the schedule) unless
	// --kafka-brokers names brokers.
	cluster *kfake.Cluster
	outage  atomic.Bool
	brokers []string

	reg     *registry.Registry
	rec     *telemetry.Recorder
	journal *admin.Journal // the dashboard's timeline, for --http
	tl      *timeline
	tmu     sync.Mutex // guards transitions and shown
	// transitions are the observer's lines; shown of them were printed.
	transitions []string
	shown       int

	routes router
	dests  []transport.Destination
	st     store
	hooks  *counts
	held   holds // set on the dashboard
	web    webServers

	mu       sync.Mutex // guards enqueued
	enqueued map[transport.Destination][]int64
}

func demo(ctx context.Context, c config, out io.Writer) error {
	scr := newScreen(out, c.live)
	r := &demoRun{c: c, out: scr, scr: scr, start: time.Now(), hooks: &counts{by: map[transport.Destination]*[4]int64{}},
		enqueued: map[transport.Destination][]int64{}}
	defer func() {
		for i := len(r.closers) - 1; i >= 0; i-- {
			r.closers[i]()
		}
	}()
	defer r.web.close()
	for _, step := range []func(context.Context) error{r.startKafka, r.newRegistry, r.connectPublishers, r.openStore, r.serve} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	proc, err := r.processor()
	if err != nil {
		return err
	}
	dispatchCtx, stopDispatch := context.WithCancel(context.Background())
	dispatched := make(chan error, 1)
	go func() { dispatched <- proc.Run(dispatchCtx) }()
	defer func() { stopDispatch(); <-dispatched }()

	fmt.Fprintf(r.out, "brokerguard demo: %d destinations, %d msg/s each for %v", len(r.dests), c.rate, c.duration)
	if r.cluster != nil {
		fmt.Fprintf(r.out, "; kafka:%s fails from %v for %v", c.outageTopic, c.outageStart, c.outageLength)
	}
	fmt.Fprintln(r.out)

	tick := time.NewTicker(max(c.duration/16, 250*time.Millisecond))
	defer tick.Stop()
	r.produceOnSchedule(ctx, tick.C)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.drain(ctx, tick.C)
	stopDispatch()
	if err := <-dispatched; err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	dispatched <- nil // for the deferred receive
	return r.report(ctx)
}

// startKafka starts the in-process Kafka, with a switch that makes the outage topic's
// partitions answer LEADER_NOT_AVAILABLE, unless --kafka-brokers names brokers.
func (r *demoRun) startKafka(context.Context) error {
	if r.brokers = splitList(r.c.kafkaBrokers); len(r.brokers) > 0 {
		return nil
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, r.c.topics...))
	if err != nil {
		return fmt.Errorf("starting the in-process Kafka: %w", err)
	}
	r.cluster, r.brokers = cluster, cluster.ListenAddrs()
	r.closers = append(r.closers, cluster.Close)
	injectOutage(cluster, r.c.outageTopic, &r.outage)
	return nil
}

// newRegistry makes the registry every publisher is guarded by, with the Recorder's
// options (its transition observer and call counting) and an observer that feeds the
// timeline, the dashboard's journal and the lines printed above the table.
func (r *demoRun) newRegistry(context.Context) error {
	r.rec = telemetry.NewRecorder()
	r.journal = admin.NewJournal(0)
	r.tl = newTimeline(nil) // lanes are named once the destinations are known
	var err error
	r.reg, err = registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: r.c.breakDuration, Jitter: 0.2}},
		append(r.rec.RegistryOptions(), registry.WithObserver(func(d transport.Destination, t breaker.Transition) {
			at := time.Since(r.start)
			if _, ok := registry.PartitionOfTransition(t); !ok { // a lane is the topic's circuit
				r.tl.transition(d.String(), change{at: at, state: t.To})
			}
			r.journal.Record(d, t)
			r.tmu.Lock()
			r.transitions = append(r.transitions, fmt.Sprintf("[%5.1fs] %s: %s -> %s (%s)", at.Seconds(), t.Identity, t.From, t.To, t.Reason))
			r.tmu.Unlock()
		}))...)
	return err
}

// connectPublishers makes the guarded publisher of each broker and lists the
// destinations: the Kafka topics, and RabbitMQ's and SQS's when their flags are set.
func (r *demoRun) connectPublishers(ctx context.Context) error {
	w := &kafkago.Writer{
		Addr: kafkago.TCP(r.brokers...), RequiredAcks: kafkago.RequireAll, MaxAttempts: 1,
		BatchTimeout: 2 * time.Millisecond, WriteTimeout: 2 * time.Second,
	}
	kpub, err := kafka.NewPublisher(w, r.reg)
	if err != nil {
		return err
	}
	r.closers = append(r.closers, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = kpub.Close(cctx)
	})
	r.routes = router{"kafka": kpub}
	for _, t := range r.c.topics {
		r.dests = append(r.dests, transport.Destination{Broker: "kafka", Name: t})
	}
	if r.c.amqpURL != "" {
		d, pub, closeFn, err := rabbitDestination(ctx, r.c.amqpURL, r.reg)
		if err != nil {
			return err
		}
		r.closers = append(r.closers, closeFn)
		r.routes["amqp"], r.dests = pub, append(r.dests, d)
	}
	if r.c.sqsEndpoint != "" {
		d, pub, err := sqsDestination(ctx, r.c.sqsEndpoint, r.reg)
		if err != nil {
			return err
		}
		r.routes["sqs"], r.dests = pub, append(r.dests, d)
	}
	r.tl.topics = names(r.dests)
	return nil
}

// openStore opens the outbox: in memory, or PostgreSQL at --database-url.
func (r *demoRun) openStore(ctx context.Context) error {
	r.st = memoryStore{memory.New(nil)}
	if r.c.databaseURL == "" {
		return nil
	}
	pool, err := pgxpool.New(ctx, r.c.databaseURL)
	if err != nil {
		return fmt.Errorf("--database-url: %w", err)
	}
	r.closers = append(r.closers, pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		return err
	}
	r.st = postgresStore{postgres.New(pool), pool}
	return nil
}

// serve starts the --metrics and --http listeners the flags ask for.
func (r *demoRun) serve(context.Context) error {
	if r.c.metrics != "" {
		m, closeFn, err := serveMetrics(&r.web, r.c.metrics, r.reg, r.rec, r.st.BacklogByDestination, r.out)
		if err != nil {
			return err
		}
		r.closers = append(r.closers, closeFn)
		r.hooks.inner = m
	}
	if r.c.http != "" {
		return serveDashboard(&r.web, r.c.http, r.reg, r.journal, r.st, &r.held, r.out)
	}
	return nil
}

// processor is the outbox dispatcher, paced to the demo's break.
func (r *demoRun) processor() (*outbox.Processor, error) {
	b := r.c.breakDuration
	return outbox.NewProcessor(r.st, r.reg, r.routes,
		outbox.WithHooks(r.hooks), outbox.WithIDHeader(idHeader), outbox.WithBatchSize(500), outbox.WithClassifier(classify),
		outbox.WithPollInterval(20*time.Millisecond), outbox.WithDeferralJitter(b/10),
		outbox.WithRejectedDelay(b/4),
		outbox.WithBackoff(outbox.Backoff{Initial: 50 * time.Millisecond, Max: b, Multiplier: 2, Jitter: 0.2}),
		outbox.WithErrorHandler(func(err error) { fmt.Fprintln(r.out, "dispatcher:", err) }))
}

// produceOnSchedule runs the producers for --duration while the outage switches on and
// off on schedule and the table refreshes on every tick.
func (r *demoRun) produceOnSchedule(ctx context.Context, tick <-chan time.Time) {
	produceCtx, stopProducing := context.WithTimeout(ctx, r.c.duration)
	defer stopProducing()
	var producers sync.WaitGroup
	for _, d := range r.dests {
		producers.Go(func() { r.produce(produceCtx, d) })
	}
	outageOn, outageOff := time.After(r.c.outageStart), time.After(r.c.outageStart+r.c.outageLength)
	if r.cluster == nil {
		outageOn, outageOff = nil, nil
	}
	r.show()
	for produceCtx.Err() == nil {
		select {
		case <-outageOn:
			r.outage.Store(true)
			r.tl.outageStart(time.Since(r.start), "outage: kafka:"+r.c.outageTopic)
			fmt.Fprintf(r.out, "[%5.1fs] outage: kafka:%s answers LEADER_NOT_AVAILABLE\n", time.Since(r.start).Seconds(), r.c.outageTopic)
		case <-outageOff:
			r.outage.Store(false)
			r.tl.outageEnd(time.Since(r.start))
			fmt.Fprintf(r.out, "[%5.1fs] outage over\n", time.Since(r.start).Seconds())
		case <-tick:
			r.show()
		case <-produceCtx.Done():
		}
	}
	if r.outage.Swap(false) {
		r.tl.outageEnd(time.Since(r.start))
	}
	producers.Wait()
}

// produce enqueues --rate messages a second for d in the outbox, in batches every
// 50 ms, until ctx ends; nothing it does depends on the brokers.
func (r *demoRun) produce(ctx context.Context, d transport.Destination) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		batch := make([]outbox.Entry, max(r.c.rate/20, 1))
		for i := range batch {
			n++
			batch[i] = outbox.Entry{Destination: d, Message: transport.Message{Key: []byte(strconv.Itoa(n % 16)), Value: fmt.Appendf(nil, "%s #%d", d, n)}}
		}
		ids, err := r.st.enqueue(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintln(r.out, "enqueue:", err)
			}
			return
		}
		r.mu.Lock()
		r.enqueued[d] = append(r.enqueued[d], ids...)
		r.mu.Unlock()
	}
}

// show prints the transitions since the last call above the table of destinations,
// and records a sample of each in the timeline.
func (r *demoRun) show() {
	snaps := r.reg.Snapshots()
	at := time.Since(r.start)
	r.tmu.Lock()
	lines := slices.Clone(r.transitions[r.shown:])
	r.shown = len(r.transitions)
	r.tmu.Unlock()
	var table strings.Builder
	fmt.Fprintf(&table, "[%5.1fs]\n", at.Seconds())
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "destination\tstate\tpublished\tholds\tfailed\tpending\t")
	for _, d := range r.dests {
		n := r.hooks.get(d)
		r.mu.Lock()
		pending := int64(len(r.enqueued[d])) - n[0] - n[3]
		r.mu.Unlock()
		r.tl.record(d.String(), sample{at: at, published: n[0], pending: pending})
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t\n", d, snaps[d].State, n[0], n[1], n[2], pending)
	}
	tw.Flush()
	r.scr.update(lines, table.String())
}

// drain waits until every enqueued row is published or dead, or a bound passes.
func (r *demoRun) drain(ctx context.Context, tick <-chan time.Time) {
	fmt.Fprintln(r.out, "producers stopped; draining the outbox")
	drainBy := time.Now().Add(max(10*time.Second, 4*r.c.breakDuration))
	for {
		pending, _, err := r.st.Backlog(ctx)
		if err == nil && pending == 0 || time.Now().After(drainBy) || ctx.Err() != nil {
			break
		}
		select {
		case <-tick:
			r.show()
		case <-ctx.Done():
		}
	}
	r.show()
	r.scr.keep()
}

// report counts the Kafka messages on the broker, prints the summary, writes the
// SVG timeline, and fails when a message was lost.
func (r *demoRun) report(ctx context.Context) error {
	onBroker := map[string]map[string]int{} // topic -> outbox id -> copies
	if err := countOnBroker(r.brokers, r.c.topics, onBroker); err != nil {
		fmt.Fprintln(r.out, "counting messages on Kafka:", err)
	}
	lost, err := summary(ctx, r.out, r.st, r.dests, r.enqueued, r.hooks, onBroker, &r.held)
	if err != nil {
		return err
	}
	if r.c.svg != "" {
		if err := r.writeSVG(); err != nil {
			return err
		}
		fmt.Fprintln(r.out, "timeline written to", r.c.svg)
	}
	if lost > 0 {
		return fmt.Errorf("%d messages lost", lost)
	}
	return nil
}

func (r *demoRun) writeSVG() error {
	f, err := os.Create(r.c.svg)
	if err != nil {
		return err
	}
	if err := r.tl.writeSVG(f, "brokerguard demo: circuit state and publish rate per destination"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// injectOutage makes kfake answer Produce for topic with LEADER_NOT_AVAILABLE while
// the switch is on, and serve it normally otherwise.
func injectOutage(cluster *kfake.Cluster, topic string, on *atomic.Bool) {
	cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		if !on.Load() || len(req.Topics) == 0 || req.Topics[0].Topic != topic {
			return nil, nil, false
		}
		return kfakeproduce.Failed(req, kfakeproduce.LeaderNotAvailable), nil, true
	})
}

// countOnBroker reads every topic from the start and counts the copies of each outbox
// row id it finds.
func countOnBroker(brokers, topics []string, into map[string]map[string]int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := endOffsets(cl, topics)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := map[string]int64{}
	for _, t := range topics {
		into[t] = map[string]int{}
	}
	for total(read) < total(ends) {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read %d of %d records before the deadline", total(read), total(ends))
		}
		f.EachRecord(func(r *kgo.Record) {
			read[r.Topic]++
			for _, h := range r.Headers {
				if h.Key == idHeader {
					into[r.Topic][string(h.Value)]++
				}
			}
		})
	}
	return nil
}

func endOffsets(cl *kgo.Client, topics []string) (map[string]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	for _, t := range topics {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition, p.Timestamp = 0, -1 // the end of the single partition
		rt.Partitions = append(rt.Partitions, p)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		return nil, err
	}
	ends := map[string]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			ends[t.Topic] += p.Offset
		}
	}
	return ends, nil
}

func total(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// summary prints what happened to every enqueued row and returns how many were lost:
// neither published nor dead, or published to Kafka but not found there. Rows still
// pending because a hold set on the dashboard defers them are held, not lost.
func summary(ctx context.Context, out io.Writer, st store, dests []transport.Destination, enqueued map[transport.Destination][]int64, hooks *counts, onBroker map[string]map[string]int, held *holds) (int, error) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "destination\tenqueued\tpublished\tdead\tholds\tlost\ton broker\tduplicates\t")
	lostAll, enqAll, pubAll := 0, 0, 0
	var heldLines []string
	for _, d := range dests {
		var published, dead, lost, found, dups, pending int
		copies := onBroker[d.Name]
		for _, id := range enqueued[d] {
			s, err := st.status(ctx, id)
			if err != nil {
				return 0, err
			}
			switch s {
			case outbox.StatusPublished:
				published++
				if d.Broker == "kafka" {
					n := copies[strconv.FormatInt(id, 10)]
					if n == 0 {
						lost++
					}
					found += min(n, 1)
					dups += max(n-1, 0)
				}
			case outbox.StatusDead:
				dead++
			default:
				pending++
			}
		}
		if until, ok := held.until(d, time.Now()); ok && pending > 0 {
			heldLines = append(heldLines, fmt.Sprintf("%s: %d rows still pending, held open from the dashboard until %s", d, pending, until.Format(time.TimeOnly)))
		} else {
			lost += pending
		}
		broker := "-"
		if d.Broker == "kafka" {
			broker = strconv.Itoa(found)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t\n", d, len(enqueued[d]), published, dead, hooks.get(d)[1], lost, broker, dups)
		lostAll, enqAll, pubAll = lostAll+lost, enqAll+len(enqueued[d]), pubAll+published
	}
	tw.Flush()
	for _, l := range heldLines {
		fmt.Fprintln(out, l)
	}
	if lostAll == 0 && enqAll == pubAll {
		fmt.Fprintf(out, "nothing lost: %d enqueued = %d published, every Kafka message found on the broker\n", enqAll, pubAll)
	} else {
		fmt.Fprintf(out, "%d enqueued, %d published, %d lost\n", enqAll, pubAll, lostAll)
	}
	return lostAll, nil
}

func rabbitDestination(ctx context.Context, url string, reg *registry.Registry) (transport.Destination, transport.Publisher, func(), error) {
	m, err := amqp.NewManager(url)
	if err != nil {
		return transport.Destination{}, nil, nil, fmt.Errorf("--amqp-url: %w", err)
	}
	conn, err := m.Connection(ctx)
	if err == nil {
		var ch *amqp091.Channel
		if ch, err = conn.Channel(); err == nil {
			err = errors.Join(
				ch.ExchangeDeclare("brokerguard-demo", "fanout", true, false, false, false, nil),
				func() error {
					_, err := ch.QueueDeclare("brokerguard-demo", true, false, false, false, nil)
					return err
				}(),
				ch.QueueBind("brokerguard-demo", "", "brokerguard-demo", false, nil),
				ch.Close())
		}
	}
	if err != nil {
		m.Close()
		return transport.Destination{}, nil, nil, fmt.Errorf("--amqp-url: declaring exchange brokerguard-demo: %w", err)
	}
	pub, err := amqp.NewPublisher(m, reg)
	if err != nil {
		m.Close()
		return transport.Destination{}, nil, nil, err
	}
	return amqp.Destination("brokerguard-demo"), pub, func() { m.Close() }, nil
}

func sqsDestination(ctx context.Context, endpoint string, reg *registry.Registry) (transport.Destination, transport.Publisher, error) {
	region, creds := awsFromEnv()
	client := awssqs.New(awssqs.Options{BaseEndpoint: aws.String(endpoint), Region: region, Credentials: creds})
	if _, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("brokerguard-demo")}); err != nil {
		return transport.Destination{}, nil, fmt.Errorf("--sqs-endpoint: creating queue brokerguard-demo: %w", err)
	}
	pub, err := sqs.NewPublisher(client, reg)
	return transport.Destination{Broker: "sqs", Name: "brokerguard-demo"}, pub, err
}

// serveMetrics exports the registry's and the outbox's metrics on addr for Prometheus,
// wired as docs/telemetry.md says a service should be: the service named
// in the resource (target_info), no per-scope labels, and a cardinality limit that
// lets every live circuit through.
func serveMetrics(web *webServers, addr string, reg *registry.Registry, rec *telemetry.Recorder, backlog telemetry.BacklogFunc, out io.Writer) (*telemetry.Metrics, func(), error) {
	promReg := promclient.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(promReg), otelprom.WithoutScopeInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "brokerguard-demo"))),
		sdkmetric.WithCardinalityLimit(telemetry.CardinalityLimit(registry.DefaultMaxDestinations)))
	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp),
		telemetry.WithOutboxBacklog(backlog, time.Second))
	if err != nil {
		return nil, nil, err
	}
	mux, base, err := web.mux("--metrics", addr)
	if err != nil {
		return nil, nil, err
	}
	mux.Handle("/metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	fmt.Fprintf(out, "metrics on %s/metrics\n", base)
	return m, func() {
		m.Close()
		mp.Shutdown(context.Background())
	}, nil
}

func names(ds []transport.Destination) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
