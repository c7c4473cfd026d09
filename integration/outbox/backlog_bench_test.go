package outbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	adminapi "github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
)

// countingStore counts the store's backlog readings, the database work behind the
// polls.
type countingStore struct {
	*postgres.Store
	reads atomic.Int64
}

func (s *countingStore) BacklogByDestination(ctx context.Context) ([]outbox.DestinationBacklog, error) {
	s.reads.Add(1)
	return s.Store.BacklogByDestination(ctx)
}

const (
	backlogRows  = 1_000_000
	backlogPolls = 10 // per dashboard, one a second
)

// BenchmarkDashboardsOnAMillionRows fills a table of its own schema (dropped at the
// end) with a million pending rows of three destinations, then has two dashboards
// poll GET /api/outbox once a second each, against the Store as it reads (an estimate
// past postgres.BacklogExactUpTo rows) and, as the control in the same run, against a
// Store made WithExactBacklog. It reports each mode's request p50 and p99 and the
// database CPU per store reading: the user and system time of the one server process
// behind the Store's pool (a single connection), from /proc, in milliseconds. Run it
// with -benchtime=1x.
func BenchmarkDashboardsOnAMillionRows(b *testing.B) {
	dsn := harness.PostgresSchema(b)
	ctx := context.Background()
	fill := newPool(b, dsn, nil)
	if err := postgres.Migrate(ctx, fill); err != nil {
		b.Fatal(err)
	}
	_, err := fill.Exec(ctx, `INSERT INTO `+postgres.Table+` (destination, msg_key, payload, created_at, visible_after)
		SELECT 'kafka:' || (ARRAY['orders', 'emails', 'audit'])[1 + g % 3], convert_to('k' || (g % 20000)::text, 'UTF8'),
			convert_to(repeat('x', 200), 'UTF8'), now(), now()
		FROM generate_series(1, $1) g`, backlogRows)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fill.Exec(ctx, `VACUUM ANALYZE `+postgres.Table); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		for _, m := range []struct {
			name string
			opts []postgres.Option
		}{{"estimate", nil}, {"exact", []postgres.Option{postgres.WithExactBacklog()}}} {
			p50, p99, cpu := pollDashboards(b, dsn, m.opts...)
			b.ReportMetric(ms(p50), m.name+"-p50-ms")
			b.ReportMetric(ms(p99), m.name+"-p99-ms")
			b.ReportMetric(cpu, m.name+"-db-cpu-ms/read")
		}
	}
}

// pollDashboards serves /api/outbox over a Store with opts on a one-connection pool
// and has two dashboards poll it; it returns the requests' p50 and p99 and the
// server process's CPU milliseconds per store reading.
func pollDashboards(b *testing.B, dsn string, opts ...postgres.Option) (p50, p99 time.Duration, cpuPerRead float64) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	var pid int
	if err := pool.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	st := &countingStore{Store: postgres.New(pool, opts...)}
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}})
	if err != nil {
		b.Fatal(err)
	}
	h, err := adminapi.New(reg, adminapi.WithOutbox(st))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	before := cpuTicks(b, pid)
	var (
		mu   sync.Mutex
		took []time.Duration
		wg   sync.WaitGroup
	)
	for range 2 {
		wg.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for range backlogPolls {
				start := time.Now()
				resp, err := http.Get(srv.URL + "/api/outbox")
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("GET /api/outbox: %s", resp.Status)
				}
				mu.Lock()
				took = append(took, time.Since(start))
				mu.Unlock()
				<-tick.C
			}
		})
	}
	wg.Wait()
	cpu := cpuTicks(b, pid) - before
	reads := max(st.reads.Load(), 1)
	return percentile(took, 50), percentile(took, 99), float64(cpu) * 10 / float64(reads) // 100 ticks a second
}

// cpuTicks returns the user and system CPU time of process pid, in clock ticks.
func cpuTicks(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Skipf("the server's CPU time is read from /proc on the same machine: %v", err)
	}
	// The fields after the command (which may hold spaces) start at its closing ')'.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}
