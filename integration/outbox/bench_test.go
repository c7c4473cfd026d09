package outbox_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
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
//     held open, so the destination is held (its rows not claimed) while the other
//     three publish.
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
		reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}})
		if err != nil {
			b.Fatal(err)
		}
		if openFirst {
			c, _ := reg.Circuit(benchDests[0])
			c.(*breaker.Breaker).ForceOpen(time.Now().Add(time.Hour))
		}
		circuits, pub = reg, reg.Guard(kp, nil)
	}
	proc, err := outbox.NewProcessor(e.store, circuits, pub, outbox.WithBatchSize(benchBatch), outbox.WithClassifier(testClassify))
	if err != nil {
		b.Fatal(err)
	}

	// Warm up the connections, metadata and prepared statements, then start afresh.
	fill(b, e, 4*benchBatch, halfToFirst)
	drain(b, proc)
	fill(b, e, benchRows, halfToFirst)

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

// fill empties the tables and enqueues n rows, to dest(i) for the i-th, in
// transactions of 10,000.
func fill(b *testing.B, e *env, n int, dest func(i int) transport.Destination) {
	b.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, "TRUNCATE "+postgres.Table+", "+postgres.HoldTable); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	for lo := 0; lo < n; lo += 10_000 {
		entries := make([]outbox.Entry, 0, 10_000)
		for i := lo; i < min(lo+10_000, n); i++ {
			entries = append(entries, outbox.Entry{Destination: dest(i), Message: transport.Message{
				Key: []byte(strconv.Itoa(i % 64)), Value: payload,
			}})
		}
		e.commit(b, entries...)
	}
	if _, err := e.pool.Exec(ctx, "ANALYZE "+postgres.Table); err != nil {
		b.Fatal(err)
	}
}

// halfToFirst sends every other row to benchDests[0] and the rest round-robin to the
// others.
func halfToFirst(i int) transport.Destination {
	if i%2 == 1 {
		return benchDests[1+(i/2)%3]
	}
	return benchDests[0]
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

// BenchmarkHealthyLatencyBesideHeldBacklog measures, on the machine's clock, how long
// rows of three healthy destinations wait between their commit and the broker's
// acknowledgement while a fourth destination is down and held, its circuit breaking
// every 200 ms, with 50,000 rows waiting for it, and the same with 10 (run it with
// -benchtime=1x). It reports the healthy rows' p99 latency in both runs and their
// ratio (backlog-p99-ratio, target <= 2): a held backlog must not slow the others
// down however long it is, break after break.
func BenchmarkHealthyLatencyBesideHeldBacklog(b *testing.B) {
	e := newEnv(b, nil)
	e.pool.Close()
	e.pool = newPool(b, e.dsn+"&synchronous_commit=off", nil)
	e.store = postgres.New(e.pool)
	var big, small latencies
	for b.Loop() {
		for range benchRounds {
			small.best(latencyRun(b, e, 10))
			big.best(latencyRun(b, e, benchRows))
		}
	}
	b.ReportMetric(small.p(0.99).Seconds()*1000, "p99-10-backlog-ms")
	b.ReportMetric(big.p(0.99).Seconds()*1000, "p99-50k-backlog-ms")
	b.ReportMetric(float64(big.p(0.99))/float64(small.p(0.99)), "backlog-p99-ratio")
}

// latencies are the healthy rows' waits of one run, sorted.
type latencies []time.Duration

func (l latencies) p(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(int(q*float64(len(l))), len(l)-1)]
}

// best keeps the run with the lower p99.
func (l *latencies) best(o latencies) {
	if len(*l) == 0 || o.p(0.99) < l.p(0.99) {
		*l = o
	}
}

// latencyRun fills benchDests[0] with backlog rows, takes it down and runs a
// dispatcher for three seconds while a producer commits a row to each healthy
// destination every 5 ms; it returns the waits of the healthy rows committed after
// the first half second.
func latencyRun(b *testing.B, e *env, backlog int) latencies {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	fill(b, e, backlog, func(int) transport.Destination { return benchDests[0] })
	brokers, cluster := harness.KafkaBrokers(b, kfake.SeedTopics(2, topics...))
	if cluster != nil {
		defer cluster.Close()
	}
	kp := newKafkaPublisher(brokers)
	defer kp.Close()
	broker := newScripted(kp)
	broker.setDown(benchDests[0], true)
	var mu sync.Mutex
	acked := map[int64]time.Time{}
	acking := publisherFunc(func(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
		err := broker.Publish(ctx, d, msgs...)
		if err == nil {
			now := time.Now()
			mu.Lock()
			for _, m := range msgs {
				acked[rowID(m.Headers)] = now
			}
			mu.Unlock()
		}
		return err
	})
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: 200 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	proc, err := outbox.NewProcessor(e.store, reg, reg.Guard(acking, testClassify), outbox.WithClassifier(testClassify),
		outbox.WithIDHeader(idHeader), outbox.WithPollInterval(10*time.Millisecond), outbox.WithDeferralJitter(20*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(runCtx) }()

	payload := make([]byte, 256)
	committed := map[int64]time.Time{}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	for time.Since(start) < 3*time.Second {
		<-tick.C
		entries := make([]outbox.Entry, 0, 3)
		for _, d := range benchDests[1:] {
			entries = append(entries, outbox.Entry{Destination: d, Message: transport.Message{Value: payload}})
		}
		ids := e.commit(b, entries...)
		if now := time.Now(); now.Sub(start) > 500*time.Millisecond {
			for _, id := range ids {
				committed[id] = now
			}
		}
	}
	tick.Stop()
	// Let the last rows go out, then stop.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := 0
		for id := range committed {
			if _, ok := acked[id]; ok {
				n++
			}
		}
		mu.Unlock()
		if n == len(committed) {
			break
		}
	}
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	var out latencies
	mu.Lock()
	defer mu.Unlock()
	for id, at := range committed {
		ack, ok := acked[id]
		if !ok {
			b.Fatalf("healthy row %d was not published within 10 s of the end", id)
		}
		out = append(out, max(ack.Sub(at), 0))
	}
	slices.Sort(out)
	b.Logf("backlog %d: %d healthy rows, %d probes of the held destination, latency p50 %v p99 %v max %v",
		backlog, len(out), broker.callsTo(benchDests[0]), out.p(0.5), out.p(0.99), out.p(1))
	return out
}
