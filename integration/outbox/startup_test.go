package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// TestRelaysStartingTogetherDoNotDeadlock starts three relays at once, each on a pool
// of its own as three processes would: Migrate, a session, then claims and
// write-backs until the round's rows are published. The first round finds no table;
// the next ones find the table at an older version (its mark removed), with rows
// pending and the relays of the previous round gone, so that each start migrates
// while the others claim. No statement may fail: a deadlock (40P01) would.
func TestRelaysStartingTogetherDoNotDeadlock(t *testing.T) {
	cluster := harness.NewPostgresCluster(t)
	dsn := cluster.DSN()
	db := newPool(t, dsn, nil)
	ctx := context.Background()
	const rounds, rows = 4, 600
	published := 0
	for round := range rounds {
		if round > 0 {
			if _, err := db.Exec(ctx, `COMMENT ON TABLE `+postgres.Table+` IS NULL`); err != nil {
				t.Fatal(err)
			}
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			errs    []error
			started = make(chan struct{})
			done    atomic.Int64
		)
		for relay := range 3 {
			pool := newPool(t, dsn, nil)
			wg.Go(func() {
				<-started
				if err := startTogether(ctx, pool, fmt.Sprintf("r%d-%d/", round, relay), round == 0, &done, rows); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("relay %d: %w", relay, err))
					mu.Unlock()
				}
			})
		}
		close(started)
		wg.Wait()
		for _, err := range errs {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				t.Errorf("round %d: deadlock: %v", round, err)
			} else {
				t.Errorf("round %d: %v", round, err)
			}
		}
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM `+postgres.Table+` WHERE status = 'published'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if published += rows; n != published {
			t.Errorf("round %d: %d rows published in all, want %d", round, n, published)
		}
	}
}

// startTogether runs one relay's start on pool: Migrate, a session for prefix, and
// claims of 100 rows marked published until done counts rows rows published. Each
// relay enqueues a third of the round's rows, as a service that enqueues while relays
// start: after its Migrate on a fresh cluster (there is no table before), before it
// on the later rounds.
func startTogether(ctx context.Context, pool pgxPool, prefix string, fresh bool, done *atomic.Int64, rows int) error {
	store := postgres.New(pool)
	if !fresh {
		if err := enqueueKeyed(ctx, pool, store, rows/3); err != nil {
			return err
		}
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		return err
	}
	if fresh {
		if err := enqueueKeyed(ctx, pool, store, rows/3); err != nil {
			return err
		}
	}
	end, err := store.Session(ctx, prefix)
	if err != nil {
		return err
	}
	defer end()
	for i := 0; done.Load() < int64(rows); i++ {
		recs, err := store.Claim(ctx, outbox.ClaimRequest{Token: fmt.Sprintf("%s%d", prefix, i), Now: time.Now(),
			Limit: 100, Lease: time.Minute, ProbeLimit: 1})
		if err != nil {
			return err
		}
		ids := make([]int64, len(recs))
		for j, r := range recs {
			ids[j] = r.ID
		}
		n, err := store.MarkPublished(ctx, fmt.Sprintf("%s%d", prefix, i), time.Now(), ids)
		if err != nil {
			return err
		}
		done.Add(int64(n))
	}
	return nil
}

// pgxPool is what a relay's start uses of its pool.
type pgxPool interface {
	postgres.DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// enqueueKeyed commits n rows of 20 keys in one transaction.
func enqueueKeyed(ctx context.Context, pool pgxPool, store *postgres.Store, n int) error {
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Key: fmt.Appendf(nil, "k%d", i%20), Value: []byte("v")}}
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.Enqueue(ctx, postgres.Pgx(tx), entries...)
		return err
	})
}
