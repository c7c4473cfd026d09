package sharedredis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// admitLoop runs Acquire + Complete(Success) for the benchmark's iterations and returns
// the wall time it took.
func admitLoop(b *testing.B, c breaker.Circuit) time.Duration {
	ctx := context.Background()
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		admit(b, ctx, c)
	}
	return time.Since(start)
}

func admit(b *testing.B, ctx context.Context, c breaker.Circuit) {
	p, err := c.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	p.Complete(breaker.Success)
}

// BenchmarkClosedAdmission compares the healthy closed path (Acquire +
// Complete(Success)) of a circuit shared through Redis, one shared through DynamoDB
// (dynalite) and the local breaker, shared ones with the default one-second
// MaxStaleness. The machine is shared, so one operation is a block of 1,000
// admissions on each circuit in turn, and the ratios compare blocks timed side by
// side. allocs/op counts all 3,000 admissions.
func BenchmarkClosedAdmission(b *testing.B) {
	const block = 1000
	p := sharedPolicy()
	p.Scope = breaker.LocalProcess
	local, err := breaker.New(identity, p)
	if err != nil {
		b.Fatal(err)
	}
	e := setup(b)
	shared := newCircuit(b, e, sharedPolicy())
	if err := shared.Refresh(b.Context()); err != nil {
		b.Fatal(err)
	}
	client := harness.DynamoDBClient(harness.Dynalite(b))
	table := harness.DynamoDBTable(b, client, "bench-")
	dyn, err := dynamo.New(client, table, identity, sharedPolicy())
	if err != nil {
		b.Fatal(err)
	}
	if err := dyn.Refresh(b.Context()); err != nil {
		b.Fatal(err)
	}
	circuits := []breaker.Circuit{local, shared, dyn}
	var took [3]time.Duration
	ctx := context.Background()
	base := e.cmds.sent.Load()
	b.ReportAllocs()
	for b.Loop() {
		for i, c := range circuits {
			start := time.Now()
			for range block {
				admit(b, ctx, c)
			}
			took[i] += time.Since(start)
		}
	}
	n := float64(b.N * block)
	b.ReportMetric(float64(took[0])/n, "ns/local")
	b.ReportMetric(float64(took[1])/n, "ns/redis")
	b.ReportMetric(float64(took[2])/n, "ns/dynamodb")
	b.ReportMetric(float64(took[1])/float64(took[0]), "redis/local")
	b.ReportMetric(float64(took[2])/float64(took[0]), "dynamodb/local")
	b.ReportMetric(float64(took[1])/float64(took[2]), "redis/dynamodb")
	b.ReportMetric(float64(e.cmds.sent.Load()-base)*1e5/n, "redis-requests/100k-admissions")
}

// BenchmarkRedisCommandsPerHealthyAdmissions counts what one healthy replica costs
// Redis while it admits calls, at a short MaxStaleness (so that a short run spans
// many refreshes) and at the default one second: the requests the client sent (a
// go-redis hook) and the commands the server executed (INFO commandstats on a private
// redis-server, the calls inside scripts included). A snapshot is refreshed once it is
// three quarters stale, with one script (EVALSHA running HGETALL, PTTL, PEXPIRE):
// expect about 1.33 requests and 5.3 server commands per staleness interval, whatever
// the number of admissions.
func BenchmarkRedisCommandsPerHealthyAdmissions(b *testing.B) {
	for _, staleness := range []time.Duration{20 * time.Millisecond, time.Second} {
		b.Run("staleness="+staleness.String(), func(b *testing.B) {
			server := harness.NewRedis(b)
			e := newEnv(b, server.Addr(), "bench:")
			c := newCircuit(b, e, sharedPolicy(), sharedstate.WithMaxStaleness(staleness))
			if err := c.Refresh(b.Context()); err != nil {
				b.Fatal(err)
			}
			if err := e.client.ConfigResetStat(b.Context()).Err(); err != nil {
				b.Fatal(err)
			}
			base := e.cmds.sent.Load()
			elapsed := admitLoop(b, c)
			requests := float64(e.cmds.sent.Load() - base)
			executed := float64(executedCommands(b, e))
			intervals := float64(elapsed) / float64(staleness)
			b.ReportMetric(requests*1e5/float64(b.N), "requests/100k-admissions")
			b.ReportMetric(executed*1e5/float64(b.N), "server-commands/100k-admissions")
			b.ReportMetric(requests/intervals, "requests/staleness-interval")
			b.ReportMetric(executed/intervals, "server-commands/staleness-interval")
		})
	}
}

// executedCommands sums the calls INFO commandstats reports, less the INFO itself
// (CONFIG RESETSTAT is not counted: it resets the statistics).
func executedCommands(b *testing.B, e env) int {
	info, err := e.client.Info(b.Context(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0
	for line := range strings.Lines(info) {
		// cmdstat_evalsha:calls=12,usec=...
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		n, err := strconv.Atoi(calls)
		if err != nil {
			b.Fatalf("commandstats line %q: %v", line, err)
		}
		total += n
	}
	return total
}
