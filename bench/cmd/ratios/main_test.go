package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkClosed/atomic-floor   	71353041	         5.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkClosed/brokerguard    	17741860	        20.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkClosed/brokerguard    	17741860	        22.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkClosed/brokerguard    	17741860	        90.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkClosed/gobreaker      	 2431766	       141.0 ns/op	      48 B/op	       1 allocs/op
BenchmarkClosed/failsafe-2     	11595186	        30.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkClosed/brokerguard-2  	11595186	        40.0 ns/op	       0 B/op	       1 allocs/op
PASS
`

func TestParseTakesMediansPerCPU(t *testing.T) {
	res, order := parse(strings.NewReader(sample))
	if got := res[key{"Closed", "brokerguard", 1}]; got.nsPerOp != 22 {
		t.Fatalf("median %v, want 22", got.nsPerOp)
	}
	if got := res[key{"Closed", "brokerguard", 2}]; got.nsPerOp != 40 || got.allocs != 1 {
		t.Fatalf("cpu 2: %+v", got)
	}
	if len(order) != 5 || order[0] != (key{"Closed", "atomic-floor", 1}) {
		t.Fatalf("order %v", order)
	}
}

func TestReportFlagsMissedTargets(t *testing.T) {
	res, order := parse(strings.NewReader(sample))
	var out strings.Builder
	missed := report(&out, res, order)
	// cpu 2: ours allocates and is slower than failsafe: two misses.
	if missed != 2 {
		t.Fatalf("missed %d, want 2:\n%s", missed, out.String())
	}
	for _, want := range []string{"cpu=1  6.41x", "MISSED"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, out.String())
		}
	}
}
