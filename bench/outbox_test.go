package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The outbox comparison: both systems deliver to a publisher that only counts (or
// stamps), so the figures are the database's and the relay's.
const (
	outboxRows    = 20_000
	outboxTx      = 500 // rows per enqueueing transaction
	forwardTopic  = "outbox"
	latencyPerSec = 50
	latencyN      = 200
)

var benchDest = transport.Destination{Broker: "kafka", Name: "orders"}

// counter counts what either system published and stamps when each payload (a row
// number in decimal) went out.
type counter struct {
	n  atomic.Int64
	mu sync.Mutex
	at map[string]time.Time // payload -> publish time; nil: not stamping
}

func (c *counter) note(payloads ...[]byte) {
	c.n.Add(int64(len(payloads)))
	if c.at == nil {
		return
	}
	now := time.Now()
	c.mu.Lock()
	for _, p := range payloads {
		c.at[string(p)] = now
	}
	c.mu.Unlock()
}

// Publish is brokerguard's transport.Publisher.
func (c *counter) Publish(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
	ps := make([][]byte, len(msgs))
	for i, m := range msgs {
		ps[i] = m.Value
	}
	c.note(ps...)
	return nil
}

// wm is the same counter as Watermill's message.Publisher.
type wm struct{ *counter }

func (w wm) Publish(_ string, msgs ...*message.Message) error {
	ps := make([][]byte, len(msgs))
	for i, m := range msgs {
		ps[i] = m.Payload
	}
	w.note(ps...)
	return nil
}

func (wm) Close() error { return nil }

func pool(b *testing.B, dsn string) *pgxpool.Pool {
	b.Helper()
	p, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// system is one outbox implementation on a fresh schema: fill enqueues rows, relay
// starts one relay (its own pool) until ctx ends.
type system struct {
	name  string
	table string
	fill  func(b *testing.B, db *pgxpool.Pool, from, n int)
	relay func(b *testing.B, ctx context.Context, dsn string, out *counter) (stop func())
}

func payload(i int) []byte { return []byte(strconv.Itoa(i)) }

// brokerguardSystem is the README's set-up: postgres.New, Migrate, NewProcessor with
// the defaults, one registry per relay, each relay its own pool; each row has its
// own key.
func brokerguardSystem(b *testing.B, db *pgxpool.Pool) system {
	if err := postgres.Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	enq := postgres.New(db)
	return system{
		name: "brokerguard", table: postgres.Table,
		fill: func(b *testing.B, db *pgxpool.Pool, from, n int) {
			entries := make([]outbox.Entry, n)
			for i := range entries {
				entries[i] = outbox.Entry{Destination: benchDest, Message: transport.Message{
					Key: []byte("key-" + strconv.Itoa(from+i)), Value: payload(from + i)}}
			}
			err := pgx.BeginFunc(context.Background(), db, func(tx pgx.Tx) error {
				_, err := enq.Enqueue(context.Background(), postgres.Pgx(tx), entries...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		},
		relay: func(b *testing.B, ctx context.Context, dsn string, out *counter) func() {
			reg, err := registry.New(breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			// The counter never fails; an adapter's guarded publisher brings its own
			// classifier.
			proc, err := outbox.NewProcessor(postgres.New(pool(b, dsn)), reg, reg.Guard(out, nil),
				outbox.WithClassifier(func(error) breaker.Outcome { return breaker.Failure }))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = proc.Run(ctx) }()
			return func() { cancel(); <-done }
		},
	}
}

// watermillSystem is Watermill's forwarder over watermill-sql's PostgreSQL queue
// schema, with the defaults; each message carries its key in its metadata.
func watermillSystem(b *testing.B, db *pgxpool.Pool) system {
	schema := wmsql.PostgreSQLQueueSchema{}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(db), wmsql.SubscriberConfig{
		SchemaAdapter: schema, OffsetsAdapter: wmsql.PostgreSQLQueueOffsetsAdapter{}, InitializeSchema: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SubscribeInitialize(forwardTopic); err != nil { // its own migration
		b.Fatal(err)
	}
	return system{
		name: "watermill", table: "watermill_" + forwardTopic,
		fill: func(b *testing.B, db *pgxpool.Pool, from, n int) {
			msgs := make([]*message.Message, n)
			for i := range msgs {
				msgs[i] = message.NewMessage(watermill.NewUUID(), payload(from+i))
				msgs[i].Metadata.Set("key", "key-"+strconv.Itoa(from+i))
			}
			err := pgx.BeginFunc(context.Background(), db, func(tx pgx.Tx) error {
				p, err := wmsql.NewPublisher(wmsql.TxFromPgx(tx), wmsql.PublisherConfig{SchemaAdapter: schema}, nil)
				if err != nil {
					return err
				}
				return forwarder.NewPublisher(p, forwarder.PublisherConfig{ForwarderTopic: forwardTopic}).Publish("orders", msgs...)
			})
			if err != nil {
				b.Fatal(err)
			}
		},
		relay: func(b *testing.B, ctx context.Context, dsn string, out *counter) func() {
			s, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(pool(b, dsn)), wmsql.SubscriberConfig{
				SchemaAdapter: schema, OffsetsAdapter: wmsql.PostgreSQLQueueOffsetsAdapter{}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			f, err := forwarder.NewForwarder(s, wm{out}, nil, forwarder.Config{ForwarderTopic: forwardTopic})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = f.Run(ctx) }()
			return func() { cancel(); <-done; _ = f.Close() }
		},
	}
}

var systems = []func(*testing.B, *pgxpool.Pool) system{brokerguardSystem, watermillSystem}

// throughput fills a fresh table with outboxRows rows (analysed or not) and times
// relays relays delivering them.
func throughput(b *testing.B, mk func(*testing.B, *pgxpool.Pool) system, relays int, analyse bool) (perSecond float64, name string) {
	b.Helper()
	dsn := harness.PostgresSchema(b)
	db := pool(b, dsn)
	sys := mk(b, db)
	ctx := context.Background()
	if _, err := db.Exec(ctx, "ALTER TABLE "+sys.table+" SET (autovacuum_enabled = false)"); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < outboxRows; from += outboxTx {
		sys.fill(b, db, from, outboxTx)
	}
	if analyse {
		if _, err := db.Exec(ctx, "ANALYZE "+sys.table); err != nil {
			b.Fatal(err)
		}
	}
	out := &counter{}
	start := time.Now()
	var stops []func()
	for range relays {
		stops = append(stops, sys.relay(b, ctx, dsn, out))
	}
	for out.n.Load() < outboxRows {
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("%s: %d of %d rows after 5 minutes", sys.name, out.n.Load(), outboxRows)
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	for _, stop := range stops {
		stop()
	}
	return float64(outboxRows) / elapsed.Seconds(), sys.name
}

// BenchmarkOutboxVersusWatermill measures, in one run, the outbox with the README's
// defaults against Watermill's SQL forwarder (watermill-sql's PostgreSQL queue
// schema): 20,000 rows, each with its own key, enqueued in transactions of 500 on a
// table created fresh for each case (never analysed, and analysed as the control),
// delivered by 1 and 3 relays. The cases are interleaved twice and the better of
// each kept (the machine is shared). It reports rows/s of both and the ratios; then
// the commit -> publish latency at 50 single-row commits a second, both at their
// defaults. Run with -benchtime=1x. Targets: every throughput ratio >= 1.5, 3
// relays >= 1 relay, latency p50 <= 20 ms.
func BenchmarkOutboxVersusWatermill(b *testing.B) {
	type key struct {
		sys      string
		relays   int
		analysed bool
	}
	best := map[key]float64{}
	for b.Loop() {
		for range 2 {
			for _, relays := range []int{1, 3} {
				for _, analysed := range []bool{false, true} {
					for _, mk := range systems {
						r, name := throughput(b, mk, relays, analysed)
						k := key{name, relays, analysed}
						best[k] = max(best[k], r)
						b.Logf("%s, %d relays, analysed %v: %.0f rows/s", name, relays, analysed, r)
					}
				}
			}
		}
	}
	for _, relays := range []int{1, 3} {
		for _, analysed := range []bool{false, true} {
			state := map[bool]string{false: "fresh", true: "analysed"}[analysed]
			bg, w := best[key{"brokerguard", relays, analysed}], best[key{"watermill", relays, analysed}]
			b.ReportMetric(bg, fmt.Sprintf("bg-%s-%d-relay-rows/s", state, relays))
			b.ReportMetric(w, fmt.Sprintf("wm-%s-%d-relay-rows/s", state, relays))
			b.ReportMetric(bg/w, fmt.Sprintf("bg/wm-%s-%d-relay", state, relays))
		}
		b.ReportMetric(best[key{"brokerguard", 3, false}]/best[key{"brokerguard", 1, false}], "bg-3/1-relay-fresh")
	}
	for _, mk := range systems {
		p50, p99, name := latency(b, mk)
		b.ReportMetric(ms(p50), name+"-p50-ms")
		b.ReportMetric(ms(p99), name+"-p99-ms")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latency commits latencyN single-row transactions, latencyPerSec a second, under one
// relay at its defaults and returns p50 and p99 of commit -> publish.
func latency(b *testing.B, mk func(*testing.B, *pgxpool.Pool) system) (p50, p99 time.Duration, name string) {
	b.Helper()
	dsn := harness.PostgresSchema(b)
	db := pool(b, dsn)
	sys := mk(b, db)
	out := &counter{at: map[string]time.Time{}}
	stop := sys.relay(b, context.Background(), dsn, out)
	time.Sleep(time.Second) // the relay is up and listening (if it listens)
	committed := make([]time.Time, latencyN)
	tick := time.NewTicker(time.Second / latencyPerSec)
	for i := range latencyN {
		<-tick.C
		sys.fill(b, db, i, 1)
		committed[i] = time.Now()
	}
	tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); out.n.Load() < latencyN && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	var lat []time.Duration
	out.mu.Lock()
	for i, c := range committed {
		if at, ok := out.at[string(payload(i))]; ok {
			lat = append(lat, at.Sub(c))
		}
	}
	out.mu.Unlock()
	if len(lat) != latencyN {
		b.Fatalf("%s: %d of %d rows published", sys.name, len(lat), latencyN)
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], sys.name
}
