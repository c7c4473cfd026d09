package outbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

type timing struct {
	mu  sync.Mutex
	tot map[string]time.Duration
	n   map[string]int
}
type tkey struct{}

func kind(sql string) string {
	switch {
	case strings.Contains(sql, "WITH RECURSIVE ended"):
		return "claim"
	case strings.Contains(sql, "status = 'published'"):
		return "mark"
	case strings.HasPrefix(sql, "SELECT set_config"):
		return "setup"
	}
	return sql[:min(30, len(sql))]
}
func (c *timing) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, tkey{}, [2]any{time.Now(), kind(d.SQL)})
}
func (c *timing) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	v := ctx.Value(tkey{}).([2]any)
	c.add(v[1].(string), time.Since(v[0].(time.Time)))
}
func (c *timing) add(k string, d time.Duration) {
	c.mu.Lock()
	c.tot[k] += d
	c.n[k]++
	c.mu.Unlock()
}
func (c *timing) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, tkey{}, [2]any{time.Now(), kind(d.Batch.QueuedQueries[len(d.Batch.QueuedQueries)-1].SQL)})
}
func (c *timing) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *timing) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	v := ctx.Value(tkey{}).([2]any)
	c.add(v[1].(string), time.Since(v[0].(time.Time)))
}

func TestZZScratch(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	e := newEnv(t, nil)
	for _, relays := range []int{1, 3} {
		for _, analyse := range []bool{false, true} {
			tm := &timing{tot: map[string]time.Duration{}, n: map[string]int{}}
			e.pool = newPool(t, e.dsn, tm)
			ctx := context.Background()
			store, tbl := ownTable(t, e)
			e.pool.Exec(ctx, "ALTER TABLE "+tbl.String()+" SET (autovacuum_enabled = false)")
			payload := make([]byte, 256)
			for lo := 0; lo < 20000; lo += 500 {
				entries := make([]outbox.Entry, 0, 500)
				for i := lo; i < lo+500; i++ {
					entries = append(entries, outbox.Entry{Destination: benchDests[i%len(benchDests)], Message: transport.Message{Key: []byte(fmt.Sprint(i)), Value: payload}})
				}
				if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error { _, err := store.Enqueue(ctx, postgres.Pgx(tx), entries...); return err }); err != nil {
					t.Fatal(err)
				}
			}
			if analyse {
				e.pool.Exec(ctx, "ANALYZE "+tbl.String())
			}
			tm.mu.Lock()
			tm.tot, tm.n = map[string]time.Duration{}, map[string]int{}
			tm.mu.Unlock()
			pub := &fakeCounting{}
			start := time.Now()
			var wg sync.WaitGroup
			per := make([]int, relays)
			for i := 0; i < relays; i++ {
				p, _ := outbox.NewProcessor(store, nil, pub, outbox.WithOwner(fmt.Sprint("r", i)))
				wg.Go(func() {
					empty := 0
					for pub.count() < 20000 {
						rep, err := p.ProcessPending(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						per[i] += rep.Claimed
						if rep.Claimed == 0 {
							empty++
							time.Sleep(time.Millisecond)
						}
					}
				})
			}
			wg.Wait()
			el := time.Since(start)
			t.Logf("relays %d analysed %v: %.0f rows/s per relay %v", relays, analyse, 20000/el.Seconds(), per)
			for k, d := range tm.tot {
				t.Logf("   %s: n=%d avg=%v", k, tm.n[k], d/time.Duration(tm.n[k]))
			}
		}
	}
}
