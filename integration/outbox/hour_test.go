package outbox_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

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
