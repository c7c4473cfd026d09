package outbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/integration/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

const (
	benchRows   = 50_000
	benchBatch  = 500
	benchRounds = 3
)

// benchDests: half the rows go to the first destination, the one the "one open" run
// holds open; the rest are spread over the three others, the always-healthy ones.
var benchDests = []transport.Destination{
	orders, emails, {Broker: "kafka", Name: "invoices"}, {Broker: "kafka", Name: "audit"},
}

// BenchmarkDispatch50k dispatches 50,000 rows from the PostgreSQL store to kfake, in
// batches of 500, in three ways per round (run it with -benchtime=1x):
//
//   - plain: no circuit consulted, the kafka publisher unguarded;
//   - guarded: every destination behind its circuit (registry.Guard), all healthy;
//   - one open: the same, with the circuit of the destination holding half the rows
//     held open, so its rows are deferred while the other three publish.
//
// It reports msgs/s of every row for plain and guarded and their ratio
// (breaker-ratio, target >= 0.95), and msgs/s of the three always-healthy
// destinations' rows in the guarded run and in the one-open run and their ratio
// (open-ratio, target >= 0.9): an open destination must not slow the others down.
//
// The machine is shared, so every iteration runs benchRounds rounds, interleaving the
// three ways, and keeps the best rate of each. Commits are asynchronous
// (synchronous_commit=off) so that the figures measure the dispatcher and the broker
// rather than the disk's fsync latency, which is the same for all three. ns/op counts
// only the bookkeeping between runs; the reported rates are the result.
func BenchmarkDispatch50k(b *testing.B) {
	e := newEnv(b, nil)
	e.pool.Close()
	e.pool = newPool(b, e.dsn+"&synchronous_commit=off", nil)
	e.store = postgres.New(e.pool)
	var plain, guarded, healthyAll, healthyOpen rate
	for b.Loop() {
		for range benchRounds {
			p, _ := dispatchRun(b, e, false, false)
			g, gh := dispatchRun(b, e, true, false)
			_, oh := dispatchRun(b, e, true, true)
			plain.best(p)
			guarded.best(g)
			healthyAll.best(gh)
			healthyOpen.best(oh)
		}
	}
	b.ReportMetric(plain.perSecond(), "plain-msgs/s")
	b.ReportMetric(guarded.perSecond(), "guarded-msgs/s")
	b.ReportMetric(guarded.perSecond()/plain.perSecond(), "breaker-ratio")
	b.ReportMetric(healthyAll.perSecond(), "healthy-all-msgs/s")
	b.ReportMetric(healthyOpen.perSecond(), "healthy-oneopen-msgs/s")
	b.ReportMetric(healthyOpen.perSecond()/healthyAll.perSecond(), "open-ratio")
}

// rate is messages over time.
type rate struct {
	msgs    int
	elapsed time.Duration
}

// best keeps the faster of r and o.
func (r *rate) best(o rate) {
	if r.msgs == 0 || o.perSecond() > r.perSecond() {
		*r = o
	}
}

func (r rate) perSecond() float64            { return float64(r.msgs) / r.elapsed.Seconds() }
func (r rate) String() string                { return strconv.FormatFloat(r.perSecond(), 'f', 0, 64) + " msgs/s" }
func isHealthy(d transport.Destination) bool { return d != benchDests[0] }

// dispatchRun fills the table with benchRows rows and dispatches them on a fresh
// kfake cluster. It returns the rate of all published rows and the rate of the
// always-healthy destinations' rows (measured until the last of them was published).
func dispatchRun(b *testing.B, e *env, guard, openFirst bool) (all, healthy rate) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	brokers, cluster := harness.KafkaBrokers(b, kfake.SeedTopics(2, topics...))
	if cluster != nil {
		defer cluster.Close() // do not keep every run's 50,000 messages until the end
	}
	kp := newKafkaPublisher(brokers)
	defer kp.Close()
	var (
		circuits outbox.Circuits
		pub      transport.Publisher = kp
	)
	if guard {
		reg, err := registry.New(breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if openFirst {
			c, _ := reg.Circuit(benchDests[0])
			c.(*breaker.Breaker).ForceOpen(time.Now().Add(time.Hour))
		}
		circuits, pub = reg, reg.Guard(kp, nil)
	}
	proc, err := outbox.NewProcessor(e.store, circuits, pub, outbox.WithBatchSize(benchBatch))
	if err != nil {
		b.Fatal(err)
	}

	// Warm up the connections, metadata and prepared statements, then start afresh.
	fill(b, e, 4*benchBatch)
	drain(b, proc)
	fill(b, e, benchRows)

	start := time.Now()
	var healthyDone time.Time
	for {
		rep, err := proc.ProcessPending(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Claimed == 0 {
			break
		}
		for d, c := range rep.ByDestination {
			all.msgs += c.Published
			if isHealthy(d) {
				healthy.msgs += c.Published
				healthyDone = time.Now()
			}
		}
	}
	all.elapsed, healthy.elapsed = time.Since(start), healthyDone.Sub(start)

	wantAll := benchRows
	if openFirst {
		wantAll = benchRows / 2
	}
	if all.msgs != wantAll || healthy.msgs != benchRows/2 {
		b.Fatalf("published %d rows (%d healthy), want %d (%d)", all.msgs, healthy.msgs, wantAll, benchRows/2)
	}
	b.Logf("guard=%v open=%v: all %v, healthy destinations %v", guard, openFirst, all, healthy)
	return all, healthy
}

// fill empties the table and enqueues n rows, every other one to benchDests[0] and the
// rest round-robin over the others, in transactions of 10,000.
func fill(b *testing.B, e *env, n int) {
	b.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, "TRUNCATE "+postgres.Table+", "+postgres.HoldTable); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	for lo := 0; lo < n; lo += 10_000 {
		entries := make([]outbox.Entry, 0, 10_000)
		for i := lo; i < min(lo+10_000, n); i++ {
			d := benchDests[0]
			if i%2 == 1 {
				d = benchDests[1+(i/2)%3]
			}
			entries = append(entries, outbox.Entry{Destination: d, Message: transport.Message{
				Key: []byte(strconv.Itoa(i % 64)), Value: payload,
			}})
		}
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			_, err := e.store.Enqueue(ctx, postgres.Pgx(tx), entries...)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := e.pool.Exec(ctx, "ANALYZE "+postgres.Table); err != nil {
		b.Fatal(err)
	}
}

func drain(b *testing.B, proc *outbox.Processor) {
	b.Helper()
	for {
		rep, err := proc.ProcessPending(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if rep.Claimed == 0 {
			return
		}
	}
}
