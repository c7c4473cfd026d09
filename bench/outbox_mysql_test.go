package bench

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql" // database/sql's "mysql" driver

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The MySQL comparison runs on the machine's MariaDB (MYSQL_DSN), each case on a
// database of its own; the figures are the database's and the relay's, as in
// outbox_test.go, whose counter, publishers and statistics it reuses.
const (
	mysqlRounds = 5
	// enqueueTxs single-row transactions are timed per case of the enqueue latency.
	enqueueTxs = 2000
	// busyBacklog rows wait when the relays start, so that they claim throughout.
	busyBacklog = 40_000
)

// openMySQL opens a pool on dsn, closed when the benchmark ends if not before.
func openMySQL(b *testing.B, dsn string) *sql.DB {
	b.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// freshStore returns a database of the benchmark's own with the outbox's tables, a
// pool on it and a Store on the pool.
func freshStore(b *testing.B) (dsn string, db *sql.DB, s *bgmysql.Store) {
	b.Helper()
	dsn = harness.MySQLDatabase(b)
	db = openMySQL(b, dsn)
	if err := bgmysql.Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	s, err := bgmysql.New(db)
	if err != nil {
		b.Fatal(err)
	}
	return dsn, db, s
}

// mysqlSystem is one outbox implementation on a fresh database: fill enqueues rows
// in one transaction, relay starts one relay (its own pool) until stopped.
type mysqlSystem struct {
	name  string
	fill  func(b *testing.B, db *sql.DB, from, n int)
	relay func(b *testing.B, dsn string, out *counter) (stop func())
}

// bgMySQL is the documented set-up: mysql.New, Migrate, NewProcessor with the
// defaults, one registry per relay, each relay its own pool; each row has its own
// key; the enqueuer commits through the Store (waking its relays, when they share
// it: here they do not, each relay has its own Store as it would in its own
// process).
func bgMySQL(b *testing.B, db *sql.DB) mysqlSystem {
	if err := bgmysql.Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	enq, err := bgmysql.New(db)
	if err != nil {
		b.Fatal(err)
	}
	return mysqlSystem{
		name: "brokerguard",
		fill: func(b *testing.B, db *sql.DB, from, n int) {
			entries := make([]outbox.Entry, n)
			for i := range entries {
				entries[i] = outbox.Entry{Destination: benchDest, Message: transport.Message{
					Key: []byte("key-" + strconv.Itoa(from+i)), Value: payload(from + i)}}
			}
			tx, err := db.Begin()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := enq.Enqueue(context.Background(), tx, entries...); err != nil {
				b.Fatal(err)
			}
			if err := enq.Commit(tx); err != nil {
				b.Fatal(err)
			}
		},
		relay: func(b *testing.B, dsn string, out *counter) func() {
			return bgRelay(b, openMySQL(b, dsn), out)
		},
	}
}

// bgRelay runs a relay at the defaults on a Store of db's own.
func bgRelay(b *testing.B, db *sql.DB, out transport.Publisher, opts ...outbox.ProcessorOption) (stop func()) {
	s, err := bgmysql.New(db)
	if err != nil {
		b.Fatal(err)
	}
	return runProcessor(b, s, out, opts...)
}

// runProcessor runs a Processor at the defaults on s until stop.
func runProcessor(b *testing.B, s outbox.Store, out transport.Publisher, opts ...outbox.ProcessorOption) (stop func()) {
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	proc, err := outbox.NewProcessor(s, reg, reg.Guard(out, nil),
		append([]outbox.ProcessorOption{outbox.WithClassifier(func(error) breaker.Outcome { return breaker.Failure })}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = proc.Run(ctx) }()
	return func() { cancel(); <-done }
}

// wmMySQL is Watermill's forwarder over watermill-sql's MySQL queue schema, with the
// defaults; each message carries its key in its metadata.
func wmMySQL(b *testing.B, db *sql.DB) mysqlSystem {
	schema := wmsql.MySQLQueueSchema{}
	sub, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db), wmsql.SubscriberConfig{
		SchemaAdapter: schema, OffsetsAdapter: wmsql.MySQLQueueOffsetsAdapter{}, InitializeSchema: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SubscribeInitialize(forwardTopic); err != nil { // its own migration
		b.Fatal(err)
	}
	return mysqlSystem{
		name: "watermill",
		fill: func(b *testing.B, db *sql.DB, from, n int) {
			msgs := make([]*message.Message, n)
			for i := range msgs {
				msgs[i] = message.NewMessage(watermill.NewUUID(), payload(from+i))
				msgs[i].Metadata.Set("key", "key-"+strconv.Itoa(from+i))
			}
			tx, err := db.Begin()
			if err != nil {
				b.Fatal(err)
			}
			p, err := wmsql.NewPublisher(wmsql.TxFromStdSQL(tx), wmsql.PublisherConfig{SchemaAdapter: schema}, nil)
			if err == nil {
				err = forwarder.NewPublisher(p, forwarder.PublisherConfig{ForwarderTopic: forwardTopic}).Publish("orders", msgs...)
			}
			if err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		},
		relay: func(b *testing.B, dsn string, out *counter) func() {
			db := openMySQL(b, dsn)
			s, err := wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db), wmsql.SubscriberConfig{
				SchemaAdapter: schema, OffsetsAdapter: wmsql.MySQLQueueOffsetsAdapter{}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			f, err := forwarder.NewForwarder(s, wm{out}, nil, forwarder.Config{ForwarderTopic: forwardTopic})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = f.Run(ctx) }()
			return func() { cancel(); <-done; _ = f.Close(); db.Close() }
		},
	}
}

var mysqlSystems = []func(*testing.B, *sql.DB) mysqlSystem{bgMySQL, wmMySQL}

// mysqlThroughput fills a fresh database with outboxRows rows and times relays
// relays delivering them, from the moment outboxWarm rows were delivered to the last.
func mysqlThroughput(b *testing.B, mk func(*testing.B, *sql.DB) mysqlSystem, relays int) (rate float64, perRelay []int64, name string) {
	b.Helper()
	dsn := harness.MySQLDatabase(b)
	db := openMySQL(b, dsn)
	defer db.Close()
	sys := mk(b, db)
	for from := 0; from < outboxRows; from += outboxTx {
		sys.fill(b, db, from, outboxTx)
	}
	out := &counter{}
	each := make([]*counter, relays)
	var stops []func()
	start := time.Now()
	for i := range each {
		each[i] = &counter{total: out}
		stops = append(stops, sys.relay(b, dsn, each[i]))
	}
	var (
		warmAt time.Time
		warmN  int64
	)
	for n := out.n.Load(); n < outboxRows; n = out.n.Load() {
		if time.Since(start) > 10*time.Minute {
			b.Fatalf("%s: %d of %d rows after 10 minutes", sys.name, n, outboxRows)
		}
		if warmAt.IsZero() && n >= outboxWarm {
			warmAt, warmN = time.Now(), n
		}
		time.Sleep(time.Millisecond)
	}
	end := time.Now()
	for _, stop := range stops {
		stop()
	}
	if warmAt.IsZero() || warmN >= outboxRows {
		b.Fatalf("%s: no rows delivered after the first %d", sys.name, outboxWarm)
	}
	for _, c := range each {
		perRelay = append(perRelay, c.n.Load())
	}
	return float64(outboxRows-warmN) / end.Sub(warmAt).Seconds(), perRelay, sys.name
}

// BenchmarkMySQLOutboxVersusWatermill measures, in one run on the same MariaDB, the
// MySQL outbox store with the documented defaults against Watermill's SQL forwarder
// (watermill-sql's MySQL queue schema): 20,000 rows, each with its own key, enqueued
// in transactions of 500 into a database created fresh for each case, delivered by 1
// and 3 relays, the rate taken after the first outboxWarm rows. The cases are
// interleaved mysqlRounds times, the order alternating between rounds; it reports the
// medians of the rates and of each round's ratio brokerguard / Watermill. Run with
// -benchtime=1x. Target: every ratio >= 1.5.
func BenchmarkMySQLOutboxVersusWatermill(b *testing.B) {
	type key struct {
		sys    string
		relays int
	}
	rates := map[key][]float64{}
	for b.Loop() {
		for round := range mysqlRounds {
			order := []int{1, 3}
			if round%2 == 1 {
				order = []int{3, 1}
			}
			for _, relays := range order {
				for _, mk := range mysqlSystems {
					r, perRelay, name := mysqlThroughput(b, mk, relays)
					rates[key{name, relays}] = append(rates[key{name, relays}], r)
					b.Logf("round %d, %s, %d relays: %.0f rows/s, rows per relay %v", round+1, name, relays, r, perRelay)
				}
			}
		}
	}
	for _, relays := range []int{1, 3} {
		bg, w := rates[key{"brokerguard", relays}], rates[key{"watermill", relays}]
		var ratios []float64
		for i := range bg {
			ratios = append(ratios, bg[i]/w[i])
		}
		b.Logf("%d relays: brokerguard / Watermill by round %s", relays, fixed(ratios))
		b.ReportMetric(median(bg), fmt.Sprintf("bg-%d-relay-rows/s", relays))
		b.ReportMetric(median(w), fmt.Sprintf("wm-%d-relay-rows/s", relays))
		b.ReportMetric(median(ratios), fmt.Sprintf("bg/wm-%d-relay", relays))
		b.ReportMetric(slices.Min(ratios), fmt.Sprintf("bg/wm-%d-relay-least", relays))
	}
}

// enqueueLatencies times enqueueTxs single-row transactions (BEGIN, Enqueue,
// Commit) through s, one after another, and returns their durations sorted.
func enqueueLatencies(b *testing.B, db *sql.DB, s *bgmysql.Store) []time.Duration {
	b.Helper()
	ctx := context.Background()
	lat := make([]time.Duration, 0, enqueueTxs)
	for i := range enqueueTxs {
		e := outbox.Entry{Destination: benchDest, Message: transport.Message{Key: []byte("user-" + strconv.Itoa(i%50)), Value: payload(busyBacklog + i)}}
		t0 := time.Now()
		tx, err := db.BeginTx(ctx, nil) // the server's default level, REPEATABLE READ
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Enqueue(ctx, tx, e); err != nil {
			b.Fatal(err)
		}
		if err := s.Commit(tx); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat
}

// BenchmarkMySQLEnqueueLatencyUnderRelays measures what relays cost the
// application: the latency of a transaction that enqueues one row (at the server's
// default isolation level, REPEATABLE READ), with no relay running; with 3 relays
// claiming a backlog of 40,000 rows (and the new rows) of the same table
// throughout; and, as the control, with the same 3 relays draining the same backlog
// in another database, which loads the machine's two cores and the server's log as
// much but shares no lock with the enqueues. Interleaved over mysqlRounds rounds, it
// reports the medians of p50 and p99 of each case and of the ratios (same table /
// alone, same table / other database). Run with -benchtime=1x. The ratio that says
// whether claims hold up inserts is same table / other database.
func BenchmarkMySQLEnqueueLatencyUnderRelays(b *testing.B) {
	cases := []string{"alone", "other-db", "same-table"}
	p50s, p99s := map[string][]float64{}, map[string][]float64{}
	for b.Loop() {
		for round := range mysqlRounds {
			for k := range cases {
				c := cases[(k+round)%len(cases)]
				dsn, db, enq := freshStore(b)
				relayDSN := dsn
				if c == "other-db" {
					relayDSN = harness.MySQLDatabase(b)
				}
				out := &counter{}
				var stops []func()
				if c != "alone" {
					rdb := openMySQL(b, relayDSN)
					rs := bgMySQL(b, rdb)
					for from := 0; from < busyBacklog; from += outboxTx {
						rs.fill(b, rdb, from, outboxTx)
					}
					for range 3 {
						stops = append(stops, bgRelay(b, openMySQL(b, relayDSN), out))
					}
					for out.n.Load() < outboxWarm { // the relays are claiming
						time.Sleep(time.Millisecond)
					}
				}
				lat := enqueueLatencies(b, db, enq)
				published := out.n.Load()
				for _, stop := range stops {
					stop()
				}
				p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
				p50s[c], p99s[c] = append(p50s[c], ms(p50)), append(p99s[c], ms(p99))
				b.Logf("round %d, %s: p50 %v, p99 %v, max %v; rows the relays published meanwhile %d of %d",
					round+1, c, p50, p99, lat[len(lat)-1], published, busyBacklog)
				db.Close()
			}
		}
	}
	ratio := func(xs, ys []float64) (out []float64) {
		for i := range xs {
			out = append(out, xs[i]/ys[i])
		}
		return out
	}
	for _, c := range cases {
		b.ReportMetric(median(p50s[c]), c+"-p50-ms")
		b.ReportMetric(median(p99s[c]), c+"-p99-ms")
	}
	b.ReportMetric(median(ratio(p99s["same-table"], p99s["alone"])), "p99-same/alone")
	b.ReportMetric(median(ratio(p99s["same-table"], p99s["other-db"])), "p99-same/other")
	b.ReportMetric(median(ratio(p50s["same-table"], p50s["other-db"])), "p50-same/other")
	b.Logf("p99 same table / other database by round %s", fixed(ratio(p99s["same-table"], p99s["other-db"])))
}

// BenchmarkMySQLWakeLatency measures commit -> publish at 50 single-row commits a
// second under one relay at its defaults: woken by the Store's Commit in the same
// process, and polling only (the enqueuer's Store is another one, as in another
// process) at the default poll interval and at 100 ms. It reports p50 and p99 of
// each. Run with -benchtime=1x.
func BenchmarkMySQLWakeLatency(b *testing.B) {
	for b.Loop() {
		for _, c := range []struct {
			name string
			poll time.Duration // 0: woken by Commit, default poll
		}{{"woken", 0}, {"poll-1s", outbox.DefaultPollInterval}, {"poll-100ms", 100 * time.Millisecond}} {
			dsn, db, enq := freshStore(b)
			relayStore := enq
			var opts []outbox.ProcessorOption
			if c.poll > 0 {
				var err error
				if relayStore, err = bgmysql.New(openMySQL(b, dsn)); err != nil {
					b.Fatal(err)
				}
				opts = append(opts, outbox.WithPollInterval(c.poll))
			}
			out := &counter{at: map[string]time.Time{}}
			stop := runProcessor(b, relayStore, out, opts...)
			committed := make([]time.Time, latencyN)
			tick := time.NewTicker(time.Second / latencyPerSec)
			for i := range latencyN {
				<-tick.C
				tx, err := db.Begin()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := enq.Enqueue(context.Background(), tx, outbox.Entry{Destination: benchDest, Message: transport.Message{Value: payload(i)}}); err != nil {
					b.Fatal(err)
				}
				if err := enq.Commit(tx); err != nil {
					b.Fatal(err)
				}
				committed[i] = time.Now()
			}
			tick.Stop()
			lat := publishLatencies(b, out, committed, stop, c.name)
			b.Logf("%s: commit -> publish p50 %v, p99 %v", c.name, lat[len(lat)/2], lat[len(lat)*99/100])
			b.ReportMetric(ms(lat[len(lat)/2]), c.name+"-p50-ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), c.name+"-p99-ms")
			db.Close()
		}
	}
}
