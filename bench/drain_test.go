package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The drain scenario: 50 online callers publish 1 KB once a second with
// 500ms deadlines while relays drain a backlog of 1 KB PostgreSQL outbox rows through
// the same registry and the same kafka-go publisher, as the README shows, to kfake
// behind a proxy that passes 300 KB/s. The link is throttled to 10 KB/s for a while
// (the broker is saturated), then restored, and the figures are taken over the time
// after it was restored.
const (
	drainCallers   = 50
	drainDeadline  = 500 * time.Millisecond
	drainMsgSize   = 1 << 10
	drainRate      = 300 << 10 // bytes per second, healthy
	drainThrottled = 10 << 10  // bytes per second, saturated
	drainKeys      = 64        // row keys, for the per-key order check
	drainIDHeader  = "outbox-id"
)

// drainPhases are the durations of: online callers alone (warm-up), saturated (the
// relays start), recovered until the last 60 s, and the last 60 s.
var (
	drainShort = []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second, 10 * time.Second}
	drainFull  = []time.Duration{5 * time.Second, 30 * time.Second, 90 * time.Second, 60 * time.Second}
)

// drainReadmePolicy is the README's outbox-section policy the issue used: consecutive
// 5, jitter 0.2, a 10 s break.
var drainReadmePolicy = registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 10 * time.Second, Jitter: 0.2}}

// drainResult is one setting's run.
type drainResult struct {
	rec        *recorder
	rows       int
	drained    time.Duration // from the recovery to the last row published; 0 if not
	publishedN int64         // rows published when the run ended
	opens      int           // openings of a closed circuit after the recovery
	reopens    int           // probes that missed or failed after the recovery
	lastReopen time.Duration // the last of them, from the recovery
	opensAll   int           // transitions to open over the whole run
	check      string        // nothing lost, per-key order
	checkOK    bool
}

// TestDrain prints the issue-27 table, with 2 relays and with 1, every setting side
// by side. GOODPUT_ROWS overrides the backlog (20,000 full, 2,000 short);
// GOODPUT_RELAYS narrows to "2" or "1"; GOODPUT_PARTITIONS is the topic's partitions
// (1).
func TestDrain(t *testing.T) {
	mode := goodputMode(t, "TestDrain")
	durs := phaseDurations(t, mode, drainShort, drainFull)
	rows := 20_000
	if mode == "short" {
		rows = 2_000
	}
	if s := os.Getenv("GOODPUT_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("GOODPUT_ROWS=%q: not a positive number", s)
		}
		rows = n
	}
	parts := 1 // as kfake and most test set-ups create a topic; GOODPUT_PARTITIONS for more
	if s := os.Getenv("GOODPUT_PARTITIONS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("GOODPUT_PARTITIONS=%q: not a positive number", s)
		}
		parts = n
	}
	settings := []setting{{name: "no breaker", policy: noBreaker()}, {name: "README policy", policy: drainReadmePolicy}}
	rec := setting{name: "recommended (limit)"}
	if p, opts, ok := adaptiveSetting(); ok {
		rec.policy, rec.opts = p, opts
	} else {
		rec.missing = "not built yet"
	}
	settings = append(settings, rec)
	for _, relays := range []int{2, 1} {
		if !selected("GOODPUT_RELAYS", strconv.Itoa(relays)) {
			continue
		}
		t.Run(fmt.Sprintf("%d relays", relays), func(t *testing.T) {
			var run []setting
			for _, s := range settings {
				if selected("GOODPUT_SETTINGS", s.name) {
					run = append(run, s)
				}
			}
			res := make([]*drainResult, len(run))
			for i, s := range run {
				if s.missing != "" {
					continue
				}
				t.Run(s.name, func(t *testing.T) { res[i] = runDrain(t, s, relays, rows, parts, durs) })
			}
			emit(t, drainTable(relays, rows, parts, durs, run, res))
		})
	}
}

// runDrain runs one setting: a fresh schema, kfake cluster and proxy.
func runDrain(t *testing.T, s setting, relays, rows, parts int, durs []time.Duration) *drainResult {
	ctx := context.Background()
	dsn := harness.PostgresSchema(t)
	pool, err := pgxpool.New(ctx, dsn+"&synchronous_commit=off")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(pool)
	topic := slowName()
	d := transport.Destination{Broker: kafka.Broker, Name: topic}
	fillBacklog(t, pool, store, d, rows)

	cluster := harness.KFake(t, kfake.SeedTopics(int32(parts), topic))
	proxy := harness.NewProxy(t, cluster.ListenAddrs()[0])
	proxy.SetRate(drainRate)

	res := &drainResult{rows: rows}
	var mu sync.Mutex
	type opening struct {
		at         time.Duration
		fromClosed bool
	}
	var opens []opening
	var start atomic.Pointer[time.Time]
	opts := append([]registry.Option{registry.WithObserver(func(_ transport.Destination, tr breaker.Transition) {
		if tr.To == breaker.Open {
			if st := start.Load(); st != nil {
				mu.Lock()
				opens = append(opens, opening{time.Since(*st), tr.From == breaker.Closed})
				mu.Unlock()
			}
		}
	})}, s.opts...)
	reg, err := registry.New(s.policy, opts...)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	tr := &kafkago.Transport{Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, proxy.Addr())
	}}
	t.Cleanup(tr.CloseIdleConnections)
	w := &kafkago.Writer{Addr: kafkago.TCP(proxy.Addr()), Transport: tr, Balancer: &kafkago.Hash{},
		RequiredAcks: kafkago.RequireAll, BatchTimeout: time.Millisecond}
	pub, err := kafka.NewPublisher(w, reg, kafka.WithCloseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	relayCtx, stopRelays := context.WithCancel(ctx)
	var relaysWG sync.WaitGroup
	var relayErrs atomic.Int64
	startRelays := func() {
		for i := range relays {
			proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithMaxAttempts(10), outbox.WithClassifier(kafka.Classify),
				outbox.WithIDHeader(drainIDHeader), outbox.WithOwner("relay-"+strconv.Itoa(i)),
				outbox.WithErrorHandler(func(error) { relayErrs.Add(1) }))
			if err != nil {
				t.Fatal(err)
			}
			relaysWG.Add(1)
			go func() {
				defer relaysWG.Done()
				if err := proc.Run(relayCtx); err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("relay %d: %v", i, err)
				}
			}()
		}
	}
	phases := []phase{
		{name: "warm-up", dur: durs[0]},
		{name: "saturated", dur: durs[1], apply: func() { proxy.SetRate(drainThrottled); startRelays() }},
		{name: "recovered", dur: durs[2], apply: func() { proxy.SetRate(drainRate) }},
		{name: "last 60 s", dur: durs[3]},
	}
	r := newRecorder(phases)
	res.rec = r
	recovery := durs[0] + durs[1]
	st := time.Now()
	start.Store(&st)
	// The drain's progress: published rows every 250ms.
	pollCtx, stopPoll := context.WithCancel(ctx)
	var pollWG sync.WaitGroup
	pollWG.Add(1)
	go func() {
		defer pollWG.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-pollCtx.Done():
				return
			case <-tick.C:
			}
			if n := published(t, pool); n >= int64(rows) {
				res.drained = max(time.Since(st)-recovery, time.Nanosecond)
				return
			}
		}
	}()
	if os.Getenv("GOODPUT_TRACE") != "" {
		pollWG.Add(1)
		go func() {
			defer pollWG.Done()
			traceDrain(t, pollCtx, reg, d, pool, st)
		}()
	}
	drive(t, r, drainCallers, time.Second, func(ctx context.Context, caller int, msg []byte) error {
		return pub.Publish(ctx, d, transport.Message{Key: []byte("online-" + strconv.Itoa(caller)), Value: msg})
	}, drainDeadline, drainMsgSize)
	stopPoll()
	pollWG.Wait()
	res.publishedN = published(t, pool)
	mu.Lock()
	for _, o := range opens {
		res.opensAll++
		switch {
		case o.at < recovery:
		case o.fromClosed:
			res.opens++
		default: // a probe of the outage's circuit that failed after the recovery
			res.reopens++
			res.lastReopen = o.at - recovery
		}
	}
	mu.Unlock()

	// Let the relays finish (bounded) so that the check sees every row, then read
	// what kfake holds, directly.
	finish := time.Now().Add(3 * time.Minute)
	for published(t, pool) < int64(rows) && time.Now().Before(finish) {
		time.Sleep(500 * time.Millisecond)
	}
	stopRelays()
	relaysWG.Wait()
	res.check, res.checkOK = checkDrain(t, pool, cluster.ListenAddrs(), topic, rows)
	if relayErrs.Load() > 0 {
		res.check += fmt.Sprintf("; %d relay errors", relayErrs.Load())
	}
	return res
}

// fillBacklog enqueues rows 1 KB rows to d, keys spread over drainKeys, in
// transactions of 5,000.
func fillBacklog(t *testing.T, pool *pgxpool.Pool, store *postgres.Store, d transport.Destination, rows int) {
	t.Helper()
	ctx := context.Background()
	payload := make([]byte, drainMsgSize)
	for i := range payload {
		payload[i] = 'r'
	}
	for lo := 0; lo < rows; lo += 5_000 {
		entries := make([]outbox.Entry, 0, 5_000)
		for i := lo; i < min(lo+5_000, rows); i++ {
			entries = append(entries, outbox.Entry{Destination: d, Message: transport.Message{
				Key: []byte("row-" + strconv.Itoa(i%drainKeys)), Value: payload}})
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := store.Enqueue(ctx, postgres.Pgx(tx), entries...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+postgres.Table); err != nil {
		t.Fatal(err)
	}
}

// published counts the rows the outbox marked published.
func published(t *testing.T, pool *pgxpool.Pool) int64 {
	var n int64
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+postgres.Table+" WHERE status = 'published'").Scan(&n); err != nil {
		t.Errorf("count published rows: %v", err)
	}
	return n
}

// checkDrain reports whether every row is published and in kfake, and whether each
// key's rows arrived in enqueue (id) order once duplicates are dropped.
func checkDrain(t *testing.T, pool *pgxpool.Pool, brokers []string, topic string, rows int) (string, bool) {
	t.Helper()
	ctx := context.Background()
	var pending, dead int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead') FROM "+postgres.Table).Scan(&pending, &dead); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[int64]bool{}
	last := map[string]int64{} // per key, the highest id seen
	var dups, outOfOrder, records int
	for idle := 0; idle < 3; { // until three polls of a second bring nothing
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		f := cl.PollFetches(pctx)
		cancel()
		n := 0
		f.EachRecord(func(r *kgo.Record) {
			n++
			records++
			for _, h := range r.Headers {
				if h.Key != drainIDHeader {
					continue
				}
				id, err := strconv.ParseInt(string(h.Value), 10, 64)
				if err != nil {
					t.Errorf("record with id header %q", h.Value)
					continue
				}
				if seen[id] {
					dups++
					continue
				}
				seen[id] = true
				k := string(r.Key)
				if id < last[k] {
					outOfOrder++
				}
				last[k] = max(last[k], id)
			}
		})
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	lost := rows - len(seen)
	ok := lost == 0 && outOfOrder == 0 && pending == 0 && dead == 0
	return fmt.Sprintf("%d of %d rows in kfake (%d duplicates, %d out of key order); %d pending, %d dead", len(seen), rows, dups, outOfOrder, pending, dead), ok
}

// drainTable is the table for one relay count.
func drainTable(relays, rows, parts int, durs []time.Duration, settings []setting, res []*drainResult) *table {
	after := durs[2] + durs[3]
	tb := &table{
		title: fmt.Sprintf("**drain, %d relay(s)**: %d online callers, 1 KB once a second, %v deadlines; %d-row backlog of 1 KB rows; kafka-go on kfake (%d partitions) behind a %d KB/s link, throttled to %d KB/s for %v after %v of warm-up; figures over the %v after recovery; %s; %s",
			relays, drainCallers, drainDeadline, rows, parts, drainRate>>10, drainThrottled>>10, durs[1], durs[0], after,
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadNote()),
		head: []string{"figure", "target"},
	}
	for _, s := range settings {
		tb.head = append(tb.head, s.name)
	}
	base := -1 // the no-breaker run, for the ratios
	for i, s := range settings {
		if s.name == "no breaker" && res[i] != nil {
			base = i
		}
	}
	goodput := func(r *drainResult, phases ...int) (ok, calls int64) {
		for _, p := range phases {
			ok += r.rec.stats[p].ok.Load()
			calls += r.rec.stats[p].calls.Load()
		}
		return ok, calls
	}
	ratio := func(i int, f func(*drainResult) float64) string {
		if base < 0 || i == base {
			return ""
		}
		b := f(res[base])
		if b == 0 {
			return ""
		}
		return fmt.Sprintf("; %.2f× no breaker", f(res[i])/b)
	}
	row := func(figure, target string, cell func(i int, r *drainResult) string) {
		cells := []string{figure, target}
		for i, s := range settings {
			if res[i] == nil {
				cells = append(cells, s.missing)
				continue
			}
			cells = append(cells, cell(i, res[i]))
		}
		tb.add(cells...)
	}
	share := func(r *drainResult, phases ...int) float64 {
		ok, calls := goodput(r, phases...)
		if calls == 0 {
			return 0
		}
		return float64(ok) / float64(calls)
	}
	row("online goodput, warm-up", "", func(_ int, r *drainResult) string { return pct(goodput(r, 0)) })
	row("online goodput, saturated", "", func(_ int, r *drainResult) string { return pct(goodput(r, 1)) })
	row(fmt.Sprintf("online goodput, %v after recovery", after), "≥ 0.9× no breaker", func(i int, r *drainResult) string {
		return pct(goodput(r, 2, 3)) + ratio(i, func(r *drainResult) float64 { return share(r, 2, 3) })
	})
	row(fmt.Sprintf("online goodput, last %v", durs[3]), "≥ 90 %", func(i int, r *drainResult) string {
		return pct(goodput(r, 3)) + ratio(i, func(r *drainResult) float64 { return share(r, 3) })
	})
	row("online calls refused after recovery", "", func(_ int, r *drainResult) string {
		var n, c int64
		for _, p := range []int{2, 3} {
			n += r.rec.stats[p].refused.Load()
			c += r.rec.stats[p].calls.Load()
		}
		return pct(n, c)
	})
	row("backlog drained after recovery", "≤ 1.25× no breaker", func(i int, r *drainResult) string {
		if r.drained == 0 {
			return fmt.Sprintf("%d of %d published", r.publishedN, r.rows)
		}
		return fmt.Sprintf("in %.1f s", r.drained.Seconds()) + ratio(i, func(r *drainResult) float64 {
			if r.drained == 0 {
				return 0
			}
			return r.drained.Seconds()
		})
	})
	row("openings of the closed circuit after recovery (all transitions to open)", "0", func(_ int, r *drainResult) string {
		return fmt.Sprintf("%d (%d)", r.opens, r.opensAll)
	})
	row("failed probes after recovery, the last at", "", func(_ int, r *drainResult) string {
		if r.reopens == 0 {
			return "0"
		}
		return fmt.Sprintf("%d, +%.2f s", r.reopens, r.lastReopen.Seconds())
	})
	row("nothing lost, per-key order", "all rows once, in order", func(_ int, r *drainResult) string {
		mark := "✗ "
		if r.checkOK {
			mark = "✓ "
		}
		return mark + r.check
	})
	row("most frequent online failures", "", func(_ int, r *drainResult) string { return r.rec.topErrors(2) })
	return tb
}

// traceDrain logs, every second until ctx ends, the rows published and what the
// destination's adaptive limit holds (GOODPUT_TRACE=1): to see why a drain is paced
// as it is.
func traceDrain(t *testing.T, ctx context.Context, reg *registry.Registry, d transport.Destination, pool *pgxpool.Pool, st time.Time) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		line := fmt.Sprintf("t=%5.1fs published=%d", time.Since(st).Seconds(), published(t, pool))
		if lim, err := reg.Admission(d); err == nil && lim != nil {
			l := lim.Stats()
			line += fmt.Sprintf(" state=%v limit=%d bulk=%d inflight=%d bulkinflight=%d baseline=%v recent=%v refused=%d",
				reg.Snapshots()[d].State, l.Limit, l.BulkLimit, l.InFlight, l.BulkInFlight, l.Baseline.Round(time.Millisecond), l.Recent.Round(time.Millisecond), l.Refused)
		}
		t.Log(line)
	}
}
