package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// pgFill inserts n pending rows of destination d, created at created, with payloads
// of pad bytes, in one statement: as many as a large backlog needs, in seconds.
func pgFill(t *testing.T, pool *pgxpool.Pool, d transport.Destination, n, pad int, created time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO `+postgres.Table+` (destination, msg_key, payload, created_at, visible_after)
		SELECT $1, convert_to('k' || (g % 50)::text, 'UTF8'), convert_to(repeat('x', $3), 'UTF8'), $4, $4
		FROM generate_series(1, $2) g`, d.String(), n, pad, created)
	if err != nil {
		t.Fatal(err)
	}
}

// backlogOf returns the backlog of d in bs, and whether it is there.
func backlogOf(bs []outbox.DestinationBacklog, d transport.Destination) (outbox.DestinationBacklog, bool) {
	for _, b := range bs {
		if b.Destination == d {
			return b, true
		}
	}
	return outbox.DestinationBacklog{}, false
}

// A destination's backlog is counted exactly up to BacklogExactUpTo rows; past it,
// from a sample of the table, marked Estimated; WithExactBacklog counts every row.
// The tables here are smaller than the sample (1,000 pages), which then reads all of
// them: the estimate is the exact count.
func TestBacklogByDestinationEstimatesPastItsCap(t *testing.T) {
	ctx := context.Background()
	pool := pgTestPool(t)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	big := transport.Destination{Broker: "kafka", Name: "big"}
	small := transport.Destination{Broker: "kafka", Name: "small"}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pgFill(t, pool, big, postgres.BacklogExactUpTo+500, 10, t0)
	pgFill(t, pool, small, 3, 10, t0.Add(time.Minute))
	clock := fakeclock.New(t0.Add(time.Hour))
	cases := []struct {
		name      string
		opts      []postgres.Option
		estimated bool
	}{
		{"estimated past the cap", nil, true},
		{"exact on demand", []postgres.Option{postgres.WithExactBacklog()}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := postgres.New(pool, append(c.opts, postgres.WithClock(clock))...)
			bs, err := s.BacklogByDestination(ctx)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := backlogOf(bs, big)
			if want := (outbox.DestinationBacklog{Destination: big, Pending: postgres.BacklogExactUpTo + 500,
				Oldest: time.Hour, Estimated: c.estimated}); b != want {
				t.Errorf("big: %+v, want %+v", b, want)
			}
			b, _ = backlogOf(bs, small)
			if want := (outbox.DestinationBacklog{Destination: small, Pending: 3, Oldest: 59 * time.Minute}); b != want {
				t.Errorf("small: %+v, want %+v", b, want)
			}
		})
	}
}

// On a table larger than the sample, the estimate scales the rows the sample saw by
// the share of the pages it read: within a tenth of the truth for a destination of
// 40,000 rows (rows of 400 bytes: about 2,300 pages, of which it reads 1,000).
func TestBacklogByDestinationSamplesALargeTable(t *testing.T) {
	ctx := context.Background()
	pool := pgTestPool(t)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	big := transport.Destination{Broker: "kafka", Name: "big"}
	pgFill(t, pool, big, 40_000, 400, time.Now())
	bs, err := postgres.New(pool).BacklogByDestination(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := backlogOf(bs, big)
	if !ok || !b.Estimated || b.Pending < 36_000 || b.Pending > 44_000 {
		t.Fatalf("backlog %+v (listed %v), want an estimate of 40,000 within a tenth", b, ok)
	}
}
