package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var (
	errDown    = errors.New("test broker: connection refused")
	errRefused = errors.New("test broker: message refused")
)

// testClassify: errDown is an outage; anything else is the message's own.
// outageOnError classifies every error as an outage of the broker.
func outageOnError(error) breaker.Outcome { return breaker.Failure }

func testClassify(err error) breaker.Outcome {
	if errors.Is(err, errDown) {
		return breaker.Failure
	}
	return breaker.Neutral
}

// scripted is a broker in front of kfake whose faults the test scripts: a destination
// that is down, a message that makes the whole call fail ("poison" values), and
// messages refused one by one (which, as in a Kafka partition, also refuses the later
// messages of their key in the call). It records the row ids kfake accepted, in
// order.
type scripted struct {
	inner transport.Publisher

	mu       sync.Mutex
	down     map[transport.Destination]bool
	refuse   func(id int64) bool
	before   func(msgs []transport.Message) error // called first, outside the lock; an error is the call's
	calls    map[transport.Destination]int
	accepted []int64
}

func newScripted(inner transport.Publisher) *scripted {
	return &scripted{inner: inner, down: map[transport.Destination]bool{}, calls: map[transport.Destination]int{}}
}

func (s *scripted) setDown(d transport.Destination, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down[d] = down
}

func (s *scripted) callsTo(d transport.Destination) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[d]
}

func (s *scripted) acceptedIDs() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.accepted)
}

func (s *scripted) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	s.mu.Lock()
	s.calls[d]++
	before := s.before
	s.mu.Unlock()
	if before != nil {
		if err := before(msgs); err != nil {
			return err
		}
	}
	s.mu.Lock()
	down, refuse := s.down[d], s.refuse
	s.mu.Unlock()
	if down {
		return fmt.Errorf("%s: %w", d, errDown)
	}
	be := &transport.BatchError{Destination: d}
	var send []transport.Message
	stopped := map[string]bool{}
	for i, m := range msgs {
		if string(m.Value) == "poison" {
			return fmt.Errorf("message %d: %w", i, errRefused)
		}
		if (m.Key != nil && stopped[string(m.Key)]) || (refuse != nil && refuse(rowID(m.Headers))) {
			be.Failed = append(be.Failed, transport.MessageError{Index: i, Err: errRefused})
			if m.Key != nil {
				stopped[string(m.Key)] = true
			}
			continue
		}
		send = append(send, m)
	}
	if len(send) > 0 {
		if err := s.inner.Publish(ctx, d, send...); err != nil {
			return err
		}
		s.mu.Lock()
		for _, m := range send {
			s.accepted = append(s.accepted, rowID(m.Headers))
		}
		s.mu.Unlock()
	}
	if len(be.Failed) > 0 {
		return be
	}
	return nil
}

// holdSetup is a registry on clock, the scripted broker over the env's kfake and a
// Processor on sc's store publishing through both.
func holdSetup(t *testing.T, clock *fakeclock.Clock, sc storeCase, p breaker.Policy, opts ...outbox.ProcessorOption) (*outbox.Processor, *scripted) {
	t.Helper()
	reg, err := registry.New(registry.Policy{Circuit: p}, registry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	kp := newKafkaPublisher(sc.env.brokers)
	t.Cleanup(func() { _ = kp.Close() })
	broker := newScripted(kp)
	base := []outbox.ProcessorOption{outbox.WithIDHeader(idHeader), outbox.WithClock(clock), outbox.WithClassifier(testClassify)}
	proc, err := outbox.NewProcessor(sc.store, reg, reg.Guard(broker, testClassify), append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return proc, broker
}

func entry(d transport.Destination, key, value string) outbox.Entry {
	e := outbox.Entry{Destination: d, Message: transport.Message{Value: []byte(value)}}
	if key != "" {
		e.Message.Key = []byte(key)
	}
	return e
}

// settle runs batches, a minute apart on the clock, until no row is pending (or an
// hour has passed).
func settle(t *testing.T, clock *fakeclock.Clock, sc storeCase, proc *outbox.Processor) {
	t.Helper()
	for range 60 {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n, _, err := sc.store.Backlog(context.Background()); err != nil || n == 0 {
			return
		}
		clock.Advance(time.Minute)
	}
	t.Fatal("rows still pending after an hour of batches")
}

// A row the broker refuses whatever happens, and (PostgreSQL) a row whose headers
// are not what Enqueue writes: each ends dead alone, with a reason naming what is
// wrong, and every other row of the batch is published once.
func TestPoisonRowEndsAlone(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		proc, broker := holdSetup(t, clock, sc, breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second},
			outbox.WithMaxAttempts(3))
		ids := sc.enqueue(t, entry(orders, "a", "1"), entry(orders, "b", "2"), entry(orders, "a", "poison"),
			entry(orders, "a", "3"), entry(orders, "b", "4"), entry(orders, "", "5"))
		poison, good := ids[2], slices.Delete(slices.Clone(ids), 2, 3)
		var undecodable int64
		if sc.pg {
			err := sc.env.pool.QueryRow(context.Background(), "INSERT INTO "+postgres.Table+
				` (destination, payload, headers, created_at, visible_after) VALUES ('kafka:orders', 'x', '{"written":"by another service"}', $1, $1) RETURNING id`,
				clock.Now()).Scan(&undecodable)
			if err != nil {
				t.Fatal(err)
			}
		}

		rep, err := proc.ProcessPending(context.Background())
		if err != nil {
			t.Fatalf("ProcessPending = %v; a poison row must not fail the batch", err)
		}
		t.Logf("first batch: %+v", rep.ByDestination[orders])
		settle(t, clock, sc, proc)

		for _, id := range good {
			if r := sc.get(t, id); r.Status != outbox.StatusPublished {
				t.Errorf("row %d: %s (%s), want published", id, r.Status, r.LastError)
			}
		}
		r := sc.get(t, poison)
		if r.Status != outbox.StatusDead || r.Attempts != 3 || !strings.HasPrefix(r.LastError, outbox.ReasonAttemptsExhausted+": ") ||
			!strings.Contains(r.LastError, errRefused.Error()) {
			t.Errorf("poison row %+v; want dead after 3 attempts, reason %s naming the broker's refusal", r, outbox.ReasonAttemptsExhausted)
		}
		if sc.pg {
			r := sc.get(t, undecodable)
			if r.Status != outbox.StatusDead || !strings.HasPrefix(r.LastError, outbox.ReasonUndecodable+": headers: ") {
				t.Errorf("undecodable row %+v; want dead with reason %s naming the headers", r, outbox.ReasonUndecodable)
			}
		}
		// Each good row went out once, and rows of one key in enqueue order: "3"
		// waited behind the poison row of its key until it was dead.
		accepted := broker.acceptedIDs()
		if got, want := slices.Sorted(slices.Values(accepted)), good; !slices.Equal(got, want) {
			t.Errorf("broker accepted %v, want each of %v once", accepted, want)
		}
		if i, j := slices.Index(accepted, ids[0]), slices.Index(accepted, ids[3]); i > j {
			t.Errorf("rows of key a published as %v: %d before %d", accepted, ids[3], ids[0])
		}
	})
}

// Calls of one Processor at once: a call whose lease ran out while its publish hung
// gets the broker's refusal of every message back after another call re-claimed the
// rows and is publishing them. Its write-backs change nothing, and a third call does
// not publish the rows again while the second's publish is in flight.
func TestConcurrentCallsOfOneProcessorAreFenced(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		proc, broker := holdSetup(t, clock, sc, breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second},
			outbox.WithLease(10*time.Second))
		ids := sc.enqueue(t, entry(orders, "a", "1"), entry(orders, "a", "2"), entry(orders, "b", "3"))

		entered := make(chan int, 2)
		release := []chan struct{}{make(chan struct{}), make(chan struct{})}
		var calls int
		var mu sync.Mutex
		broker.before = func(msgs []transport.Message) error {
			mu.Lock()
			i := calls
			calls++
			mu.Unlock()
			if i >= 2 {
				return nil
			}
			entered <- i
			<-release[i]
			if i == 1 {
				return nil
			}
			be := &transport.BatchError{Destination: orders}
			for j := range msgs {
				be.Failed = append(be.Failed, transport.MessageError{Index: j, Err: errRefused})
			}
			return be
		}
		type result struct {
			rep outbox.Report
			err error
		}
		run := func() chan result {
			ch := make(chan result, 1)
			go func() {
				rep, err := proc.ProcessPending(context.Background())
				ch <- result{rep, err}
			}()
			return ch
		}

		first := run()
		<-entered
		clock.Advance(11 * time.Second) // the first call's lease ends mid-publish
		second := run()
		<-entered
		close(release[0])
		a := <-first
		if a.err != nil || a.rep.Total() != (outbox.Counts{}) {
			t.Errorf("stale call: %+v, %v; want no row changed", a.rep.Total(), a.err)
		}
		for _, id := range ids {
			if r := sc.get(t, id); r.Attempts != 0 || r.LeaseOwner == "" {
				t.Errorf("the stale call changed row %d, which another call holds: %+v", id, r)
			}
		}
		third, err := proc.ProcessPending(context.Background())
		if err != nil || third.Claimed != 0 {
			t.Errorf("third call claimed %d rows (%v) while the second publishes them", third.Claimed, err)
		}
		close(release[1])
		b := <-second
		if b.err != nil || b.rep.Total() != (outbox.Counts{Published: 3}) {
			t.Errorf("second call: %+v, %v; want 3 published", b.rep.Total(), b.err)
		}
		if got := broker.acceptedIDs(); !slices.Equal(got, ids) {
			t.Errorf("broker accepted %v, want %v once each", got, ids)
		}
	})
}

// Rows of one destination and key are published in enqueue order through partial
// batch failures, an outage with its holds and one-row probes, and batches that cut
// keys in two.
func TestKeyOrderThroughAnOutage(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		proc, broker := holdSetup(t, clock, sc, breaker.Policy{FailureThreshold: 1, BreakDuration: 30 * time.Second},
			outbox.WithBatchSize(20))
		var entries []outbox.Entry
		for i := range 90 {
			entries = append(entries, entry(orders, "k"+strconv.Itoa(i%3), strconv.Itoa(i)))
		}
		ids := sc.enqueue(t, entries...)
		keyOf := map[int64]int{}
		for i, id := range ids {
			keyOf[id] = i % 3
		}
		tried := map[int64]bool{}
		broker.refuse = func(id int64) bool { // every 7th row is refused on its first try
			first := !tried[id]
			tried[id] = true
			return first && id%7 == 0
		}
		t0 := clock.Now()
		for clock.Now().Sub(t0) < 30*time.Minute {
			elapsed := clock.Now().Sub(t0)
			broker.setDown(orders, elapsed >= time.Second && elapsed < 5*time.Minute)
			if _, err := proc.ProcessPending(context.Background()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Second)
		}

		accepted := broker.acceptedIDs()
		if got := slices.Sorted(slices.Values(accepted)); !slices.Equal(got, ids) {
			t.Fatalf("broker accepted %d rows (%v), want each of the %d once", len(accepted), accepted, len(ids))
		}
		last := map[int]int64{}
		for _, id := range accepted {
			if k := keyOf[id]; id < last[k] {
				t.Errorf("key k%d: row %d published after row %d", k, id, last[k])
			} else {
				last[k] = id
			}
		}
		deferrals := 0
		for _, id := range ids {
			r := sc.get(t, id)
			if r.Status != outbox.StatusPublished {
				t.Errorf("row %d: %s", id, r.Status)
			}
			deferrals += r.Deferrals
		}
		t.Logf("%d publishes, %d row deferrals", broker.callsTo(orders), deferrals)
	})
}

// Header keys come back byte for byte, or Enqueue refuses them naming the header:
// keys are stored as text, which cannot hold invalid UTF-8 or NUL.
func TestHeaderKeysRoundTripOrAreRefused(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		good := []transport.Header{{Key: "ключ", Value: []byte{0, 0xff}}, {Key: "a b\t\"c\"", Value: nil}, {Key: "", Value: []byte("empty key")}}
		ids := sc.enqueue(t, outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("v"), Headers: good}})
		got := sc.get(t, ids[0]).Message.Headers
		if len(got) != len(good) {
			t.Fatalf("headers read back %q, want %q", got, good)
		}
		for i := range good {
			if got[i].Key != good[i].Key || string(got[i].Value) != string(good[i].Value) {
				t.Errorf("header %d read back %q=%q, want %q=%q", i, got[i].Key, got[i].Value, good[i].Key, good[i].Value)
			}
		}
		for _, key := range []string{"caf\xe9", "nul\x00key"} {
			_, err := sc.tryEnqueue(
				outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("fine")}},
				outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("bad"), Headers: []transport.Header{{Key: key}}}})
			if err == nil || !strings.Contains(err.Error(), "entry 1") || !strings.Contains(err.Error(), strconv.Quote(key)) {
				t.Errorf("Enqueue with header key %q = %v; want an error naming entry 1 and the key", key, err)
			}
		}
		if n, _, _ := sc.store.Backlog(context.Background()); n != 1 {
			t.Errorf("backlog %d after refused enqueues, want only the first row", n)
		}
	})
}

// writeCounter is a Store that counts the writes made for one destination: rows
// claimed, and the rows each write-back reports changed (the contract test holds
// both stores to those counts), plus one per Hold or Unhold.
type writeCounter struct {
	outbox.Store
	dest        transport.Destination
	ids         map[int64]bool // the destination's rows
	rows, holds int
}

func (w *writeCounter) mine(ids []int64) bool { return len(ids) > 0 && w.ids[ids[0]] }

func (w *writeCounter) Claim(ctx context.Context, r outbox.ClaimRequest) ([]outbox.Record, error) {
	recs, err := w.Store.Claim(ctx, r)
	for _, rec := range recs {
		if rec.Destination == w.dest {
			w.rows++
		}
	}
	return recs, err
}

func (w *writeCounter) MarkPublished(ctx context.Context, token string, now time.Time, ids []int64) (int, error) {
	n, err := w.Store.MarkPublished(ctx, token, now, ids)
	if w.mine(ids) {
		w.rows += n
	}
	return n, err
}

func (w *writeCounter) Defer(ctx context.Context, d outbox.Deferral) (int, error) {
	n, err := w.Store.Defer(ctx, d)
	if w.mine(d.IDs) {
		w.rows += n
	}
	return n, err
}

func (w *writeCounter) Fail(ctx context.Context, token string, fs []outbox.Failure) (int, int, error) {
	failed, dead, err := w.Store.Fail(ctx, token, fs)
	if len(fs) > 0 && w.ids[fs[0].ID] {
		w.rows += failed + dead
	}
	return failed, dead, err
}

func (w *writeCounter) Hold(ctx context.Context, h outbox.Hold) (int, error) {
	dead, err := w.Store.Hold(ctx, h)
	w.holds++
	w.rows += dead
	return dead, err
}

func (w *writeCounter) Unhold(ctx context.Context, d transport.Destination, token string) error {
	w.holds++
	return w.Store.Unhold(ctx, d, token)
}

// countTriggers makes PostgreSQL itself count the row updates of the outbox table and
// the writes of the hold table, per destination, into row_writes.
const countTriggers = `
CREATE TABLE row_writes (tbl text, destination text, n bigint NOT NULL, PRIMARY KEY (tbl, destination));
CREATE FUNCTION count_row_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE d text;
BEGIN
	IF TG_OP = 'DELETE' THEN d := OLD.destination; ELSE d := NEW.destination; END IF;
	INSERT INTO row_writes VALUES (TG_TABLE_NAME, d, 1)
	ON CONFLICT (tbl, destination) DO UPDATE SET n = row_writes.n + 1;
	RETURN NULL;
END $$;
CREATE TRIGGER count_writes AFTER UPDATE ON ` + postgres.Table + ` FOR EACH ROW EXECUTE FUNCTION count_row_write();
CREATE TRIGGER count_writes AFTER INSERT OR UPDATE OR DELETE ON ` + postgres.HoldTable + ` FOR EACH ROW EXECUTE FUNCTION count_row_write();`

// An hour-long outage of one destination out of four, 1,000 rows each enqueued over
// the hour at a steady pace, with the Processor's defaults and 30-second breaks, on a
// fake clock. No row dies (MaxCircuitDeferral is 24 hours) and none is charged an
// attempt; all are published once the destination recovers, each once; and the
// outage costs writes per break, not per row.
func TestHourLongOutageOfOneDestinationOfFour(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		down := orders
		dests := []transport.Destination{orders, emails, {Broker: "kafka", Name: "invoices"}, {Broker: "kafka", Name: "audit"}}
		counter := &writeCounter{Store: sc.store, dest: down, ids: map[int64]bool{}}
		sc.store = counter
		if sc.pg {
			if _, err := sc.env.pool.Exec(context.Background(), countTriggers); err != nil {
				t.Fatal(err)
			}
		}
		proc, broker := holdSetup(t, clock, sc, breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second})

		const (
			perDest     = 1000
			enqueueOver = 70 * time.Minute
			outageStart = 5 * time.Minute
			outageEnd   = outageStart + time.Hour
			runFor      = 80 * time.Minute
		)
		t0 := clock.Now()
		var all []int64
		enqueued := 0
		var rowsAtStart, holdsAtStart, callsAtStart int
		var pgAtStart map[string]int64
		var rowsAtEnd, holdsAtEnd, probes, heldRows int
		var pgAtEnd map[string]int64
		for elapsed := time.Duration(0); elapsed < runFor; elapsed = clock.Now().Sub(t0) {
			switch elapsed {
			case outageStart:
				broker.setDown(down, true)
				rowsAtStart, holdsAtStart, callsAtStart = counter.rows, counter.holds, broker.callsTo(down)
				pgAtStart = pgWrites(t, sc)
			case outageEnd:
				broker.setDown(down, false)
				rowsAtEnd, holdsAtEnd = counter.rows, counter.holds
				probes = broker.callsTo(down) - callsAtStart
				pgAtEnd = pgWrites(t, sc)
				for _, id := range all {
					if r := sc.get(t, id); r.Destination == down && r.Status == outbox.StatusPending {
						heldRows++
					}
				}
			}
			// One row per destination every 4.2 seconds.
			if due := min(int(elapsed*perDest/enqueueOver), perDest); due > enqueued {
				var entries []outbox.Entry
				for i := enqueued; i < due; i++ {
					for _, d := range dests {
						entries = append(entries, entry(d, "k"+strconv.Itoa(i%8), strconv.Itoa(i)))
					}
				}
				ids := sc.enqueue(t, entries...)
				for i, id := range ids {
					if entries[i].Destination == down {
						counter.ids[id] = true
					}
				}
				all = append(all, ids...)
				enqueued = due
			}
			for batches := 0; ; batches++ { // as Run does: again at once after a full batch, else wait the poll interval
				if batches == 100 {
					t.Fatalf("%v into the run: 100 full batches in a row", elapsed)
				}
				rep, err := proc.ProcessPending(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if rep.Claimed < outbox.DefaultBatchSize {
					break
				}
			}
			clock.Advance(outbox.DefaultPollInterval)
		}

		rows, holds := rowsAtEnd-rowsAtStart, holdsAtEnd-holdsAtStart
		t.Logf("1 h outage of %s: %d rows held at its end, %d broker calls (the breaks' probes and the failures that opened the circuit), "+
			"%d row updates and %d hold writes (%.3f row updates per held row)",
			down, heldRows, probes, rows, holds, float64(rows)/float64(heldRows))
		if probes < 100 || probes > 130 {
			t.Errorf("%d calls to the broken destination in an hour of 30-second breaks; want one probe per break", probes)
		}
		if rows+holds > 5*probes {
			t.Errorf("%d row updates and %d hold writes for %d breaks; want at most 5 per break", rows, holds, probes)
		}
		if sc.pg {
			pgRows := pgAtEnd[postgres.Table+" "+down.String()] - pgAtStart[postgres.Table+" "+down.String()]
			pgHolds := pgAtEnd[postgres.HoldTable+" "+down.String()] - pgAtStart[postgres.HoldTable+" "+down.String()]
			t.Logf("PostgreSQL's own count: %d row updates, %d hold writes", pgRows, pgHolds)
			if pgRows+pgHolds > 5*int64(probes) {
				t.Errorf("PostgreSQL counted %d row updates and %d hold writes for %d breaks; want at most 5 per break", pgRows, pgHolds, probes)
			}
		}

		accepted := map[int64]int{}
		for _, id := range broker.acceptedIDs() {
			accepted[id]++
		}
		for _, id := range all {
			r := sc.get(t, id)
			if r.Status != outbox.StatusPublished || r.Attempts != 0 || accepted[id] != 1 {
				t.Fatalf("row %d (%s): %s, %d attempts, published %d times; want published once, no attempt",
					id, r.Destination, r.Status, r.Attempts, accepted[id])
			}
		}
		if len(all) != perDest*len(dests) {
			t.Fatalf("%d rows enqueued, want %d", len(all), perDest*len(dests))
		}
	})
}

// pgWrites reads row_writes (PostgreSQL only) as "table destination" -> writes.
func pgWrites(t *testing.T, sc storeCase) map[string]int64 {
	t.Helper()
	if !sc.pg {
		return nil
	}
	rows, err := sc.env.pool.Query(context.Background(), "SELECT tbl || ' ' || destination, n FROM row_writes")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
