package main

import (
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
)

// A circuit whose shared store refuses its evidence says so in the table.
func TestDegradedCircuitIsShown(t *testing.T) {
	since := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	var out strings.Builder
	rows := []circuitRow{{Circuit: admin.Circuit{Destination: "kafka:orders", State: "open", DegradedSince: &since}},
		{Circuit: admin.Circuit{Destination: "kafka:audit", State: "closed"}}}
	if err := printCircuits(&out, false, false, rows, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[1], "open (degraded since 2031-03-04T05:06:07Z)") || strings.Contains(lines[2], "degraded") {
		t.Fatalf("table:\n%s\nwant the first circuit marked degraded, the second not", out.String())
	}
}
