// Package interleave compares a guarded operation with its raw counterpart in one
// benchmark loop, alternating them, so that both see the same machine state; on a
// shared machine, separate sub-benchmarks do not, and their ratio drifts.
package interleave

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// Run alternates raw and guarded (which goes first alternates too) for b.N rounds and
// reports raw-ns/op, guarded-ns/op and raw/guarded: the guarded operation's
// throughput relative to the raw one's (1 means no cost). It also reports
// median-raw/guarded, the median over rounds of the round's raw time over its guarded
// time: a stall of the shared machine lands in one round and moves the sums, not the
// median. An error fails b.
func Run(b *testing.B, raw, guarded func() error) {
	b.Helper()
	var rawTime, guardedTime time.Duration
	var ratios []float64
	timed := func(op func() error) time.Duration {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for i := 0; b.Loop(); i++ {
		var r, g time.Duration
		if i%2 == 0 {
			r = timed(raw)
			g = timed(guarded)
		} else {
			g = timed(guarded)
			r = timed(raw)
		}
		rawTime += r
		guardedTime += g
		ratios = append(ratios, float64(r)/float64(g))
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(rawTime.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(guardedTime.Nanoseconds())/float64(b.N), "guarded-ns/op")
	b.ReportMetric(float64(rawTime)/float64(guardedTime), "raw/guarded")
	if len(ratios) > 0 {
		b.ReportMetric(ratios[len(ratios)/2], "median-raw/guarded")
	}
}

// Sub runs Run as the sub-benchmark name of b, after reset (when not nil; a kfake
// cluster's ApplyRetention, say, so that every sub-benchmark starts with the same
// heap) and a garbage collection, reporting allocations.
func Sub(b *testing.B, name string, reset func(), raw, guarded func() error) {
	b.Run(name, func(b *testing.B) {
		if reset != nil {
			reset()
		}
		runtime.GC()
		b.ReportAllocs()
		Run(b, raw, guarded)
	})
}
