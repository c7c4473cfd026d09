package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// nopPublisher accepts everything.
type nopPublisher struct{}

func (nopPublisher) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return nil
}

// errorLog keeps when each relay's error handler was called.
type errorLog struct {
	mu   sync.Mutex
	at   map[int][]time.Time
	last error
}

func (l *errorLog) handler(relay int) func(error) {
	return func(err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.at == nil {
			l.at = map[int][]time.Time{}
		}
		l.at[relay] = append(l.at[relay], time.Now())
		l.last = err
	}
}

// firstAfter returns, per relay, its first error at or after t (zero: none yet).
func (l *errorLog) firstAfter(relays int, t time.Time) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]time.Time, relays)
	for r := range relays {
		for _, at := range l.at[r] {
			if !at.Before(t) {
				out[r] = at
				break
			}
		}
	}
	return out
}

// runRelays runs n Processors' Run on store until the test ends; each one's errors go
// to log. It fails the test if a Run returns before its context ends.
func runRelays(t *testing.T, n int, store outbox.Store, pub transport.Publisher, log *errorLog, opts ...outbox.ProcessorOption) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range n {
		o := append([]outbox.ProcessorOption{outbox.WithIDHeader(idHeader), outbox.WithOwner(fmt.Sprint("relay-", i)),
			outbox.WithClassifier(testClassify)}, opts...)
		if log != nil {
			o = append(o, outbox.WithErrorHandler(log.handler(i)))
		}
		p, err := outbox.NewProcessor(store, nil, pub, o...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			err := p.Run(ctx)
			if ctx.Err() == nil {
				t.Errorf("relay %d: Run returned %v while its context lasted", i, err)
			}
		})
	}
}

// enqueueRows commits n rows, each with its own key, for two destinations, in
// transactions of 100 on db.
func enqueueRows(t *testing.T, db *pgxpool.Pool, store *postgres.Store, n int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []int64
	for lo := 0; lo < n; lo += 100 {
		entries := make([]outbox.Entry, 0, 100)
		for i := lo; i < min(lo+100, n); i++ {
			entries = append(entries, outbox.Entry{Destination: benchDests[i%2], Message: transport.Message{
				Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v"),
			}})
		}
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			got, err := store.Enqueue(ctx, postgres.Pgx(tx), entries...)
			ids = append(ids, got...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// waitPublished waits up to within until every id was published and returns when
// that happened; the test fails with the missing count otherwise.
func waitPublished(t *testing.T, pub *countingPublisher, ids []int64, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := pub.published()
		missing := 0
		for _, id := range ids {
			if got[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows not published after %v", missing, len(ids), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// duplicates counts the publishes of ids beyond the first.
func duplicates(pub *countingPublisher, ids []int64) (n int) {
	got := pub.published()
	for _, id := range ids {
		n += max(got[id]-1, 0)
	}
	return n
}

// throughProxy returns dsn with its host and port replaced by addr, and with the
// connect timeout the docs recommend (docs/outbox-database.md): without it a pool
// dialling a silent address waits for the kernel, holding a slot of the pool.
func throughProxy(t *testing.T, dsn, addr string, connectTimeout time.Duration) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	q := u.Query()
	q.Set("connect_timeout", strconv.Itoa(int(connectTimeout.Seconds())))
	u.RawQuery = q.Encode()
	return u.String()
}

func upstreamOf(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		t.Skipf("DATABASE_URL %q has no host:port to put a proxy in front of", dsn)
	}
	return u.Host
}

// TestSilentDatabaseIsAnErrorThenRelaysRecover puts a TCP proxy in front of
// PostgreSQL and makes it go silent (connections open, nothing answers): every relay
// reports an error within the store timeout; once the proxy forwards again, the rows
// enqueued meanwhile are all published within twice that timeout.
func TestSilentDatabaseIsAnErrorThenRelaysRecover(t *testing.T) {
	const timeout, relays = 2 * time.Second, 3
	dsn := harness.PostgresSchema(t)
	direct := newPool(t, dsn, nil)
	if err := postgres.Migrate(context.Background(), direct); err != nil {
		t.Fatal(err)
	}
	proxy := harness.NewProxy(t, upstreamOf(t, dsn))
	viaProxy := newPool(t, throughProxy(t, dsn, proxy.Addr(), timeout), nil)
	t.Cleanup(proxy.Close) // before the pool closes: pgx waits for hung connections to end
	store := postgres.New(viaProxy, postgres.WithTimeout(timeout))
	enqueuer := postgres.New(direct)
	pub := newCounting(nopPublisher{})
	log := &errorLog{}
	runRelays(t, relays, store, pub, log, outbox.WithStoreTimeout(timeout), outbox.WithPollInterval(100*time.Millisecond))

	first := enqueueRows(t, direct, enqueuer, 200)
	waitPublished(t, pub, first, 10*time.Second)

	silent := time.Now()
	proxy.BlackHole()
	during := enqueueRows(t, direct, enqueuer, 200)
	deadline := time.Now().Add(3 * timeout)
	var slowest time.Duration // the last relay's first error, from the silence
	for {
		at := log.firstAfter(relays, silent)
		reported := 0
		for r, when := range at {
			if !when.IsZero() {
				reported++
				slowest = max(slowest, when.Sub(silent))
				// The claim under way may have started just before the silence, and a
				// loaded machine delays the report (2.34s seen, against 2s): 1.75x the
				// timeout leaves that room and still fails a relay that waits out two.
				if d := when.Sub(silent); d > timeout+3*timeout/4 {
					t.Errorf("relay %d reported its first error %v after the silence began; store timeout %v", r, d, timeout)
				}
			}
		}
		if reported == relays {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d relays reported an error within %v of the silence", reported, relays, 3*timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	log.mu.Lock()
	if !errors.Is(log.last, context.DeadlineExceeded) {
		t.Errorf("error reported: %v; want a deadline", log.last)
	}
	log.mu.Unlock()

	healed := time.Now()
	proxy.Forward(upstreamOf(t, dsn))
	t.Cleanup(func() {
		if t.Failed() {
			log.mu.Lock()
			t.Logf("last error: %v", log.last)
			log.mu.Unlock()
			rows, _ := direct.Query(context.Background(), `SELECT pid, coalesce(state,''), coalesce(wait_event_type,''), coalesce(wait_event,''), left(query, 70), coalesce(now()-xact_start, '0') FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
			for rows.Next() {
				var pid int
				var st, wt, we, q string
				var age time.Duration
				_ = rows.Scan(&pid, &st, &wt, &we, &q, &age)
				t.Logf("backend %d %s %s/%s %v: %s", pid, st, wt, we, age, q)
			}
			rows.Close()
		}
	})
	done := waitPublished(t, pub, during, 5*timeout)
	if d := done.Sub(healed); d > 2*timeout {
		t.Errorf("rows published %v after the database answered again; want within %v", d, 2*timeout)
	}
	t.Logf("every relay's first error within %v of the silence; all %d rows published %v after the proxy forwarded again",
		slowest.Round(time.Millisecond), len(during), done.Sub(healed).Round(time.Millisecond))
}

// TestFailoverWithSilentOldConnections moves the database's address while relays
// publish: the old connections go silent for good and new ones reach the server (the
// same one, as a promoted replica under a virtual address would be). Every row is
// published, with at most one batch duplicated per relay (a batch whose mark was
// lost on a silent connection goes out again when its lease ends).
func TestFailoverWithSilentOldConnections(t *testing.T) {
	const timeout, relays, batch, rows = time.Second, 3, 50, 3000
	dsn := harness.PostgresSchema(t)
	direct := newPool(t, dsn, nil)
	if err := postgres.Migrate(context.Background(), direct); err != nil {
		t.Fatal(err)
	}
	ids := enqueueRows(t, direct, postgres.New(direct), rows)
	proxy := harness.NewProxy(t, upstreamOf(t, dsn))
	store := postgres.New(newPool(t, throughProxy(t, dsn, proxy.Addr(), timeout), nil), postgres.WithTimeout(timeout))
	t.Cleanup(proxy.Close) // before the pool closes: pgx waits for hung connections to end
	pub := newCounting(slowPublisher{time.Millisecond})
	runRelays(t, relays, store, pub, &errorLog{}, outbox.WithStoreTimeout(timeout),
		outbox.WithLease(3*timeout), outbox.WithBatchSize(batch), outbox.WithPollInterval(100*time.Millisecond))
	for len(pub.published()) < rows/4 {
		time.Sleep(5 * time.Millisecond)
	}
	proxy.BlackHole()
	proxy.Forward(upstreamOf(t, dsn))
	waitPublished(t, pub, ids, 60*time.Second)
	if d := duplicates(pub, ids); d > relays*batch {
		t.Errorf("%d duplicate publishes; want at most one batch per relay (%d)", d, relays*batch)
	} else {
		t.Logf("every row published; %d duplicates (at most %d)", d, relays*batch)
	}
}

// slowPublisher takes d per publish.
type slowPublisher struct{ d time.Duration }

func (p slowPublisher) Publish(ctx context.Context, _ transport.Destination, _ ...transport.Message) error {
	select {
	case <-time.After(p.d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestRunWithDefaultsSurvivesARestart restarts (pg_ctl restart) a PostgreSQL cluster
// of the test's own under three relays that run with the defaults and no error
// handler: no Run ends, every row is published, none twice.
func TestRunWithDefaultsSurvivesARestart(t *testing.T) {
	cluster := harness.NewPostgresCluster(t)
	db := newPool(t, cluster.DSN(), nil)
	ctx := context.Background()
	if err := postgres.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(db)
	pub := newCounting(slowPublisher{time.Millisecond})
	ids := enqueueRows(t, db, store, 1500)
	runRelays(t, 3, store, pub, nil)
	for len(pub.published()) < 300 {
		time.Sleep(5 * time.Millisecond)
	}
	if err := cluster.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	ids = append(ids, enqueueRows(t, db, store, 300)...)
	waitPublished(t, pub, ids, 60*time.Second)
	// A batch published but not yet marked when the server went down goes out again.
	if d := duplicates(pub, ids); d > 3*outbox.DefaultBatchSize {
		t.Errorf("%d duplicate publishes; want at most one batch per relay", d)
	}
	t.Logf("all %d rows published %v after the restart; %d duplicates", len(ids), time.Since(restarted).Round(time.Millisecond), duplicates(pub, ids))
}

// relayCount counts the rows one relay published.
type relayCount struct{ n atomic.Int64 }

func (c *relayCount) RecordDispatch(_ transport.Destination, published, _, _, _ int) {
	c.n.Add(int64(published))
}

// TestRelaysShareTheRows runs three relays at the defaults on 6,000 rows, each with
// its own key: every relay publishes at least half its share (claims made at the same
// instant used to pick the same rows, and the ones that came back empty waited out
// their poll interval: 15,969 / 4,031 / 0 of 20,000), and every row goes out once.
func TestRelaysShareTheRows(t *testing.T) {
	const relays, rows = 3, 6000
	dsn := harness.PostgresSchema(t)
	db := newPool(t, dsn, nil)
	if err := postgres.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(db)
	ids := enqueueRows(t, db, store, rows)
	pub := newCounting(slowPublisher{time.Millisecond})
	counts := make([]*relayCount, relays)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range counts {
		counts[i] = &relayCount{}
		p, err := outbox.NewProcessor(postgres.New(newPool(t, dsn, nil)), nil, pub,
			outbox.WithIDHeader(idHeader), outbox.WithHooks(counts[i]), outbox.WithClassifier(testClassify))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = p.Run(ctx) })
	}
	waitPublished(t, pub, ids, 60*time.Second)
	var got []int64
	for _, c := range counts {
		got = append(got, c.n.Load())
	}
	for i, n := range got {
		if n < rows/(2*relays) {
			t.Errorf("relay %d published %d of %d rows (all: %v); want a fair part", i, n, rows, got)
		}
	}
	if d := duplicates(pub, ids); d != 0 {
		t.Errorf("%d duplicate publishes", d)
	}
	t.Logf("rows per relay: %v", got)
}
