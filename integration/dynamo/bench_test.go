package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// admitLoop runs Acquire + Complete(Success) for the benchmark's iterations and returns
// the wall time it took.
func admitLoop(b *testing.B, c breaker.Circuit) time.Duration {
	ctx := context.Background()
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		p, err := c.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		p.Complete(breaker.Success)
	}
	return time.Since(start)
}

// BenchmarkClosedAdmission compares the healthy closed path of a shared circuit (with
// the default one-second MaxStaleness) with the local breaker's.
func BenchmarkClosedAdmission(b *testing.B) {
	b.Run("shared", func(b *testing.B) {
		e := setup(b)
		c := newCircuit(b, e, sharedPolicy())
		if err := c.Refresh(b.Context()); err != nil {
			b.Fatal(err)
		}
		base := e.calls.total()
		admitLoop(b, c)
		b.ReportMetric(float64(e.calls.total()-base)*1e5/float64(b.N), "calls/100k-admissions")
	})
	b.Run("local", func(b *testing.B) {
		p := sharedPolicy()
		p.Scope = breaker.LocalProcess
		c, err := breaker.New(identity, p)
		if err != nil {
			b.Fatal(err)
		}
		admitLoop(b, c)
	})
}

// BenchmarkDynamoDBCallsPerHealthyAdmissions counts the requests a healthy shared
// circuit sends with a short MaxStaleness, so that a one-second run spans many
// refreshes. A snapshot is refreshed once it is three quarters stale, so expect about
// 1.33 requests per staleness interval, whatever the number of admissions.
func BenchmarkDynamoDBCallsPerHealthyAdmissions(b *testing.B) {
	const staleness = 20 * time.Millisecond
	e := setup(b)
	c := newCircuit(b, e, sharedPolicy(), sharedstate.WithMaxStaleness(staleness))
	if err := c.Refresh(b.Context()); err != nil {
		b.Fatal(err)
	}
	base := e.calls.total()
	elapsed := admitLoop(b, c)
	calls := float64(e.calls.total() - base)
	b.ReportMetric(calls*1e5/float64(b.N), "calls/100k-admissions")
	b.ReportMetric(calls/(float64(elapsed)/float64(staleness)), "calls/staleness-interval")
}
