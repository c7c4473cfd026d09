package main

import (
	"context"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/transport"
)

// Asking for help is not a usage error: the usage goes to stdout and run returns nil,
// so the command exits 0.
func TestTopLevelHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help"} {
		var out, errOut strings.Builder
		if err := run(context.Background(), []string{arg}, &out, &errOut); err != nil || !strings.Contains(out.String(), "usage: brokerguard COMMAND") {
			t.Errorf("brokerguard %s: %v, stdout %q", arg, err, out.String())
		}
	}
}

// The demo's "holds" column counts the times a destination was held (a batch given
// back uncharged), not the rows: two holds of 100 and 50 claimed rows are 2.
func TestDemoCountsHolds(t *testing.T) {
	c := &counts{by: map[transport.Destination]*[4]int64{}}
	d := transport.Destination{Broker: "kafka", Name: "payments"}
	c.RecordDispatch(d, 0, 100, 0, 0)
	c.RecordDispatch(d, 7, 0, 1, 0)
	c.RecordDispatch(d, 0, 50, 0, 2)
	if got := c.get(d); got != [4]int64{7, 2, 1, 2} {
		t.Fatalf("published, holds, failed, dead = %v; want [7 2 1 2]", got)
	}
}
