package filestate_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
)

// BenchmarkClosedAdmission compares Acquire + Complete(Success) on a healthy closed
// circuit: the local breaker against a file circuit served by its snapshot (the wall
// clock, default staleness; the file is read about every 250ms).
func BenchmarkClosedAdmission(b *testing.B) {
	p := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}
	local, err := breaker.New("kafka:orders", p)
	if err != nil {
		b.Fatal(err)
	}
	s, err := filestate.Open(filepath.Join(b.TempDir(), "circuits"))
	if err != nil {
		b.Fatal(err)
	}
	p.Scope = breaker.SingleHost
	file, err := s.Circuit("kafka:orders", p)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		c    breaker.Circuit
	}{{"local", local}, {"filestate", file}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					permit, err := bc.c.Acquire(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if !permit.Complete(breaker.Success) {
						b.Fatal("a success on a closed circuit did not count")
					}
				}
			})
		})
	}
}
