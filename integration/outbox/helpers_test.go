// Package outbox_test runs the outbox dispatcher against the machine's PostgreSQL and
// an in-process kfake Kafka cluster, publishing through a guarded kafka-go writer.
package outbox_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// idHeader carries the row id on every published message, so the tests can count
// deliveries per row on the Kafka side.
const idHeader = "outbox-id"

var (
	orders = transport.Destination{Broker: "kafka", Name: "orders"}
	emails = transport.Destination{Broker: "kafka", Name: "emails"}
)

// kafkaPublisher is a minimal transport.Publisher over kafka-go's Writer: the
// destination's name is the topic, and kafka-go's per-message WriteErrors become a
// *transport.BatchError.
type kafkaPublisher struct{ w *kafka.Writer }

// newKafkaPublisher returns a publisher the caller closes.
func newKafkaPublisher(brokers []string) *kafkaPublisher {
	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Balancer:     &kafka.Hash{},
		BatchSize:    1000,
		BatchTimeout: 100 * time.Microsecond, // WriteMessages hands a partition its messages at once
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  1,
		WriteTimeout: 10 * time.Second,
		ReadTimeout:  10 * time.Second,
	}
	return &kafkaPublisher{w: w}
}

func (p *kafkaPublisher) Close() error { return p.w.Close() }

func (p *kafkaPublisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	km := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		km[i] = kafka.Message{Topic: d.Name, Key: m.Key, Value: m.Value}
		for _, h := range m.Headers {
			km[i].Headers = append(km[i].Headers, kafka.Header{Key: h.Key, Value: h.Value})
		}
	}
	err := p.w.WriteMessages(ctx, km...)
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		be := &transport.BatchError{Destination: d}
		for i, e := range we {
			if e != nil {
				be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: e})
			}
		}
		return be
	}
	return err
}

// countingPublisher counts the messages its inner publisher accepted, per row id.
type countingPublisher struct {
	inner transport.Publisher

	mu    sync.Mutex
	calls map[transport.Destination]int
	ids   map[int64]int
}

func newCounting(inner transport.Publisher) *countingPublisher {
	return &countingPublisher{inner: inner, calls: map[transport.Destination]int{}, ids: map[int64]int{}}
}

func (c *countingPublisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	c.mu.Lock()
	c.calls[d]++
	c.mu.Unlock()
	err := c.inner.Publish(ctx, d, msgs...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		c.ids[rowID(m.Headers)]++
	}
	return nil
}

// published returns how many times each row id was published.
func (c *countingPublisher) published() map[int64]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.ids)
}

func (c *countingPublisher) callsTo(d transport.Destination) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[d]
}

func rowID(hs []transport.Header) int64 {
	for _, h := range hs {
		if h.Key == idHeader {
			id, _ := strconv.ParseInt(string(h.Value), 10, 64)
			return id
		}
	}
	return 0
}

// statements counts the SQL statements run on a pool, a batch as one.
type statements struct {
	mu   sync.Mutex
	sqls []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	s.sqls = append(s.sqls, strings.TrimSpace(data.SQL))
	s.mu.Unlock()
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch (one round trip) as one statement.
func (s *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, strings.TrimSpace(q.SQL))
	}
	s.mu.Lock()
	s.sqls = append(s.sqls, "batch: "+strings.Join(sqls, ";\n"))
	s.mu.Unlock()
	return ctx
}

func (s *statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (s *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns the statements seen since the last take.
func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sqls
	s.sqls = nil
	return out
}

// env is a migrated outbox table in a schema of the test's own, and a kfake cluster.
type env struct {
	dsn     string
	pool    *pgxpool.Pool
	stmts   *statements
	clock   breaker.Clock
	store   *postgres.Store
	brokers []string
	cluster *kfake.Cluster
}

var topics = []string{"orders", "emails", "invoices", "audit"}

func newEnv(t testing.TB, clock breaker.Clock) *env {
	t.Helper()
	e := &env{dsn: harness.PostgresSchema(t), stmts: &statements{}, clock: clock}
	e.pool = newPool(t, e.dsn, e.stmts)
	if err := postgres.Migrate(context.Background(), e.pool); err != nil {
		t.Fatal(err)
	}
	e.store = postgres.New(e.pool, postgres.WithClock(clock))
	e.brokers, e.cluster = harness.KafkaBrokers(t, kfake.SeedTopics(2, topics...))
	e.stmts.take()
	return e
}

func newPool(t testing.TB, dsn string, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	pool, err := openPool(dsn, tracer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// openPool opens a pool on dsn whose statements go to tracer, if any.
func openPool(dsn string, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// enqueue commits n rows for d in one transaction and returns their ids.
func (e *env) enqueue(t testing.TB, d transport.Destination, n int) []int64 {
	t.Helper()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: d, Message: transport.Message{
			Key: []byte("key-" + strconv.Itoa(i%16)), Value: []byte(d.Name + " payload " + strconv.Itoa(i)),
		}}
	}
	return e.commit(t, entries...)
}

// commit enqueues entries in one transaction and returns their ids.
func (e *env) commit(t testing.TB, entries ...outbox.Entry) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = e.store.Enqueue(ctx, postgres.Pgx(tx), entries...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (e *env) get(t testing.TB, id int64) outbox.Record {
	t.Helper()
	r, err := e.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// guarded returns a registry with policy p on the env's clock and the kafka publisher
// (counted) under its guard.
func (e *env) guarded(t testing.TB, p breaker.Policy, brokers []string) (*registry.Registry, *countingPublisher, transport.Publisher) {
	t.Helper()
	var opts []registry.Option
	if e.clock != nil {
		opts = append(opts, registry.WithClock(e.clock))
	}
	reg, err := registry.New(registry.Policy{Circuit: p}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	kp := newKafkaPublisher(brokers)
	t.Cleanup(func() { _ = kp.Close() })
	counted := newCounting(kp)
	return reg, counted, reg.Guard(counted, nil)
}

func (e *env) processor(t testing.TB, reg *registry.Registry, pub transport.Publisher, opts ...outbox.ProcessorOption) *outbox.Processor {
	t.Helper()
	base := []outbox.ProcessorOption{outbox.WithIDHeader(idHeader)}
	if e.clock != nil {
		base = append(base, outbox.WithClock(e.clock))
	}
	var circuits outbox.Circuits
	if reg != nil {
		circuits = reg
	}
	p, err := outbox.NewProcessor(e.store, circuits, pub, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// consumeIDs reads topics from the start until want messages arrived (or the timeout
// passes) and counts them per row id.
func consumeIDs(t testing.TB, brokers []string, want int, topics ...string) map[int64]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got, n := map[int64]int{}, 0
	for n < want && ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		fetches.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == idHeader {
					id, _ := strconv.ParseInt(string(h.Value), 10, 64)
					got[id]++
				}
			}
			n++
		})
	}
	return got
}

// deadAddress returns a loopback address nobody listens on: connections are refused.
func deadAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// countRows counts rows matching a WHERE clause.
func (e *env) countRows(t testing.TB, where string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+postgres.Table+" WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// heldUntil returns when the hold of d ends (zero when d is not held).
func (e *env) heldUntil(t testing.TB, d transport.Destination) time.Time {
	t.Helper()
	var until time.Time
	err := e.pool.QueryRow(context.Background(), "SELECT held_until FROM "+postgres.HoldTable+" WHERE destination = $1", d.String()).Scan(&until)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return until
}
