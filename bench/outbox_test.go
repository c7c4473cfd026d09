package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// outboxRounds is how many times each throughput case runs, interleaved: every
	// round runs all cases, so a burst of other work on a shared machine lands on one
	// round rather than on one case. The figures are the medians over the rounds.
	outboxRounds = 5
	// outboxWarm rows are delivered before the clock starts: the relays' connections
	// are open and their first claims planned on a cold server process (tens of
	// milliseconds each, taken once per connection, three times with three relays), so
	// the rate is the steady one a running relay has. The rate from the relays' start
	// is logged beside it.
	outboxWarm = 2_000
)

var benchDest = transport.Destination{Broker: "kafka", Name: "orders"}

// counter counts what either system published and stamps when each payload (a row
// number in decimal) went out.
type counter struct {
	n  atomic.Int64
	mu sync.Mutex
	at map[string]time.Time // payload -> publish time; nil: not stamping
	// total, if set, counts (and stamps) what this one counts, and those of the other
	// relays: each relay gets its own counter so that its share can be told.
	total *counter
}

func (c *counter) note(payloads ...[]byte) {
	c.n.Add(int64(len(payloads)))
	if c.total != nil {
		c.total.note(payloads...)
	}
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

// backends are the server processes of every pool the benchmark opened, so that the
// database's CPU time can be told apart from the other work on a shared machine.
var backends sync.Map // pid (uint32) -> struct{}

// pool opens a pool on dsn whose connections are counted in backends, closed when
// the benchmark ends if not before (a relay closes its own when it stops: the pools of
// every case open at once would pass the server's max_connections).
func pool(b *testing.B, dsn string) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		backends.Store(c.PgConn().PID(), struct{}{})
		return nil
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
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
	fill  func(b *testing.B, db *pgxpool.Pool, from, n, keys int) // rows from, from+1, ... over keys keys
	relay func(b *testing.B, ctx context.Context, dsn string, out *counter) (stop func())
}

func payload(i int) []byte { return []byte(strconv.Itoa(i)) }

// rowKey is the key of row i of a table whose rows have keys keys, round robin (so
// that the oldest rows span every key).
func rowKey(i, keys int) string { return "key-" + strconv.Itoa(i%keys) }

// brokerguardSystem is the README's set-up: postgres.New, Migrate, NewProcessor with
// the defaults, one registry per relay, each relay its own pool.
func brokerguardSystem(b *testing.B, db *pgxpool.Pool) system {
	if err := postgres.Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	enq := postgres.New(db)
	return system{
		name: "brokerguard", table: postgres.Table,
		fill: func(b *testing.B, db *pgxpool.Pool, from, n, keys int) {
			entries := make([]outbox.Entry, n)
			for i := range entries {
				entries[i] = outbox.Entry{Destination: benchDest, Message: transport.Message{
					Key: []byte(rowKey(from+i, keys)), Value: payload(from + i)}}
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
			reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second}})
			if err != nil {
				b.Fatal(err)
			}
			// The counter never fails; an adapter's guarded publisher brings its own
			// classifier.
			db := pool(b, dsn)
			proc, err := outbox.NewProcessor(postgres.New(db), reg, reg.Guard(out, nil),
				outbox.WithClassifier(func(error) breaker.Outcome { return breaker.Failure }))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = proc.Run(ctx) }()
			return func() { cancel(); <-done; db.Close() }
		},
	}
}

// watermillSystem is Watermill's forwarder over watermill-sql's PostgreSQL queue
// schema, with the defaults; each message carries its key in its metadata (the
// forwarder keeps one order for all of them).
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
		fill: func(b *testing.B, db *pgxpool.Pool, from, n, keys int) {
			msgs := make([]*message.Message, n)
			for i := range msgs {
				msgs[i] = message.NewMessage(watermill.NewUUID(), payload(from+i))
				msgs[i].Metadata.Set("key", rowKey(from+i, keys))
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
			db := pool(b, dsn)
			s, err := wmsql.NewSubscriber(wmsql.BeginnerFromPgx(db), wmsql.SubscriberConfig{
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
			return func() { cancel(); <-done; _ = f.Close(); db.Close() }
		},
	}
}

var systems = []func(*testing.B, *pgxpool.Pool) system{brokerguardSystem, watermillSystem}

// cpuTimes is the CPU time used so far by each known backend (read from /proc, so
// only for a server on this machine; empty otherwise) and, under 0, by this process.
func cpuTimes() map[uint32]time.Duration {
	out := map[uint32]time.Duration{}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		out[0] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	backends.Range(func(k, _ any) bool {
		pid := k.(uint32)
		stat, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/stat")
		if err != nil {
			return true
		}
		// utime and stime are fields 14 and 15, in clock ticks (100 a second on Linux);
		// the command name before them may hold spaces, so count from its ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			out[pid] = time.Duration(u+s) * 10 * time.Millisecond
		}
		return true
	})
	return out
}

// cpuSince is the CPU time the database's backends and this process used since
// start (backends that exited meanwhile are not counted).
func cpuSince(start map[uint32]time.Duration) (db, relay time.Duration) {
	for pid, t := range cpuTimes() {
		if pid == 0 {
			relay = t - start[0]
		} else {
			db += t - start[pid]
		}
	}
	return db, relay
}

// run is one throughput case's result.
type run struct {
	perSecond float64 // after the first outboxWarm rows
	fromStart float64 // all the rows, from the relays' start
	cpu       rowCPU  // CPU time per row delivered after the first outboxWarm rows
	perRelay  []int64 // rows each relay published
}

// leastShare is the fewest rows a relay published against an even share.
func (r run) leastShare() float64 {
	return float64(slices.Min(r.perRelay)) / (float64(outboxRows) / float64(len(r.perRelay)))
}

// throughput fills a fresh table with outboxRows rows (analysed or not) and times
// relays relays delivering them, from the moment outboxWarm rows were delivered to the
// last row (and, logged, from the relays' start). It also measures the CPU time the
// delivery took over the same rows, in the database (the backends of the relays'
// pools) and in this process.
func throughput(b *testing.B, mk func(*testing.B, *pgxpool.Pool) system, c outboxCase, relays int) (r run, name string) {
	b.Helper()
	dsn := harness.PostgresSchema(b)
	db := pool(b, dsn)
	defer db.Close()
	sys := mk(b, db)
	ctx := context.Background()
	if _, err := db.Exec(ctx, "ALTER TABLE "+sys.table+" SET (autovacuum_enabled = false)"); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < outboxRows; from += outboxTx {
		sys.fill(b, db, from, outboxTx, c.keys)
	}
	if c.analysed {
		if _, err := db.Exec(ctx, "ANALYZE "+sys.table); err != nil {
			b.Fatal(err)
		}
	}
	out := &counter{}
	each := make([]*counter, relays)
	start := time.Now()
	var stops []func()
	for i := range each {
		each[i] = &counter{total: out}
		stops = append(stops, sys.relay(b, ctx, dsn, each[i]))
	}
	var (
		warmAt time.Time
		warmN  int64 // rows delivered when the clock started (a batch may pass outboxWarm)
		cpu0   map[uint32]time.Duration
	)
	for n := out.n.Load(); n < outboxRows; n = out.n.Load() {
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("%s: %d of %d rows after 5 minutes", sys.name, n, outboxRows)
		}
		if cpu0 == nil && n >= outboxWarm {
			warmAt, warmN, cpu0 = time.Now(), n, cpuTimes()
		}
		time.Sleep(time.Millisecond)
	}
	end := time.Now()
	dbCPU, relayCPU := cpuSince(cpu0)
	for _, stop := range stops {
		stop()
	}
	if cpu0 == nil || warmN >= outboxRows { // every row came in the poll that passed outboxWarm
		b.Fatalf("%s: no rows delivered after the first %d", sys.name, outboxWarm)
	}
	rows := outboxRows - warmN
	r = run{
		perSecond: float64(rows) / end.Sub(warmAt).Seconds(),
		fromStart: float64(outboxRows) / end.Sub(start).Seconds(),
		cpu:       rowCPU{dbCPU / time.Duration(rows), relayCPU / time.Duration(rows)},
	}
	for _, c := range each {
		r.perRelay = append(r.perRelay, c.n.Load())
	}
	return r, sys.name
}

// rowCPU is CPU time per row delivered.
type rowCPU struct{ db, relay time.Duration }

func (c rowCPU) total() time.Duration { return c.db + c.relay }

// outboxCase is one table the throughput cases fill: how many keys its rows have
// (round robin) and whether it is analysed before the relays start.
type outboxCase struct {
	keys     int
	analysed bool
}

func (c outboxCase) String() string {
	state := map[bool]string{false: "fresh", true: "analysed"}[c.analysed]
	if c.keys == outboxRows {
		return state
	}
	return fmt.Sprintf("%s-%d-keys", state, c.keys)
}

// outboxCases: every row its own key, on a fresh and an analysed table; and 200 keys
// (fewer than a batch: 100 rows each), where one claim spans every key and relays
// share the keys by their sessions (outbox.Sessions).
var outboxCases = []outboxCase{{outboxRows, false}, {outboxRows, true}, {200, false}}

// BenchmarkOutboxVersusWatermill measures, in one run, the outbox with the README's
// defaults against Watermill's SQL forwarder (watermill-sql's PostgreSQL queue
// schema): 20,000 rows enqueued in transactions of 500 on a table created fresh for
// each case (outboxCases: each row its own key, never analysed and analysed as the
// control; and 200 keys), delivered by 1 and 3 relays, the rate taken after the first
// outboxWarm rows. The cases are interleaved outboxRounds times (the machine is
// shared): in each round and case both systems run with 1 and with 3 relays back to
// back, in an order that alternates between rounds, so that each ratio is taken
// between runs minutes apart at most and a slow patch of the machine weighs on both
// sides. It reports the median over the rounds of rows/s, of each round's ratios
// (brokerguard / Watermill, and brokerguard's 3 relays / 1 relay) and of the CPU time
// per row (the relays' database backends and the relays' process: a figure other work
// on the machine disturbs less than the rate), and the fewest rows one of 3 relays
// published against an even share (the least of the rounds); every round is logged.
// Then the commit -> publish latency at 50 single-row commits a second, both at their
// defaults. Run with -benchtime=1x. Targets: every throughput ratio >= 1.5; 3 relays
// >= 1.5x 1 relay with every row its own key and >= 1.2x on 200 keys; latency p50 <=
// 20 ms.
func BenchmarkOutboxVersusWatermill(b *testing.B) {
	type key struct {
		sys    string
		relays int
		c      outboxCase
	}
	runs := map[key][]run{}
	for b.Loop() {
		for round := range outboxRounds {
			for _, c := range outboxCases {
				order := []int{1, 3}
				if round%2 == 1 {
					order = []int{3, 1}
				}
				for _, relays := range order {
					for _, mk := range systems {
						r, name := throughput(b, mk, c, relays)
						runs[key{name, relays, c}] = append(runs[key{name, relays, c}], r)
						b.Logf("round %d, %s, %s, %d relays: %.0f rows/s (%.0f from the start), rows per relay %v, CPU per row: database %v, relays %v",
							round+1, c, name, relays, r.perSecond, r.fromStart, r.perRelay, r.cpu.db, r.cpu.relay)
					}
				}
			}
		}
	}
	rate := func(k key, i int) float64 { return runs[k][i].perSecond }
	for _, c := range outboxCases {
		for _, relays := range []int{1, 3} {
			bg, w := key{"brokerguard", relays, c}, key{"watermill", relays, c}
			var bgRates, wmRates, ratios, bgCPU, wmCPU []float64
			for i := range runs[bg] {
				bgRates, wmRates = append(bgRates, rate(bg, i)), append(wmRates, rate(w, i))
				ratios = append(ratios, rate(bg, i)/rate(w, i))
				bgCPU, wmCPU = append(bgCPU, us(runs[bg][i].cpu.total())), append(wmCPU, us(runs[w][i].cpu.total()))
			}
			b.Logf("%s, %d relays: brokerguard / Watermill by round %s", c, relays, fixed(ratios))
			b.ReportMetric(median(bgRates), fmt.Sprintf("bg-%s-%d-relay-rows/s", c, relays))
			b.ReportMetric(median(wmRates), fmt.Sprintf("wm-%s-%d-relay-rows/s", c, relays))
			b.ReportMetric(median(ratios), fmt.Sprintf("bg/wm-%s-%d-relay", c, relays))
			b.ReportMetric(median(bgCPU), fmt.Sprintf("bg-%s-%d-relay-cpu-µs/row", c, relays))
			b.ReportMetric(median(wmCPU), fmt.Sprintf("wm-%s-%d-relay-cpu-µs/row", c, relays))
		}
		one, three := key{"brokerguard", 1, c}, key{"brokerguard", 3, c}
		var scaling []float64
		least := 1.0
		for i := range runs[three] {
			scaling = append(scaling, rate(three, i)/rate(one, i))
			least = min(least, runs[three][i].leastShare())
		}
		b.Logf("%s: brokerguard 3 relays / 1 relay by round %s", c, fixed(scaling))
		b.ReportMetric(median(scaling), fmt.Sprintf("bg-3/1-relay-%s", c))
		b.ReportMetric(slices.Min(scaling), fmt.Sprintf("bg-3/1-relay-least-%s", c))
		b.ReportMetric(least, fmt.Sprintf("bg-3-relay-least-share-%s", c))
	}
	for _, mk := range systems {
		p50, p99, name := latency(b, mk)
		b.ReportMetric(ms(p50), name+"-p50-ms")
		b.ReportMetric(ms(p99), name+"-p99-ms")
	}
}

// median is the middle of xs (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// fixed writes xs with two decimals, in round order.
func fixed(xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return "[" + strings.Join(out, " ") + "]"
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

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
		sys.fill(b, db, i, 1, outboxRows)
		committed[i] = time.Now()
	}
	tick.Stop()
	lat := publishLatencies(b, out, committed, stop, sys.name)
	return lat[len(lat)/2], lat[len(lat)*99/100], sys.name
}

// publishLatencies waits up to 10 s for out to see the rows committed at the times
// committed (row i carries payload(i)), stops the relay and returns each row's commit
// -> publish latency, sorted; a row not published fails b, naming what ran.
func publishLatencies(b *testing.B, out *counter, committed []time.Time, stop func(), what string) []time.Duration {
	b.Helper()
	for deadline := time.Now().Add(10 * time.Second); out.n.Load() < int64(len(committed)) && time.Now().Before(deadline); {
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
	if len(lat) != len(committed) {
		b.Fatalf("%s: %d of %d rows published", what, len(lat), len(committed))
	}
	slices.Sort(lat)
	return lat
}
