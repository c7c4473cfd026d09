package chaos

import (
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"
)

// result is one scenario's line in the summary the suite prints at the end.
type result struct {
	scenario                        string
	in, delivered, duplicates, lost int
	took                            time.Duration
}

var (
	resultsMu sync.Mutex
	results   []result
)

func record(r result) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, r)
}

func printSummary(w io.Writer) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if len(results) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nscenario\tmessages in\tdelivered\tduplicates\tlost\ttime")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\n", r.scenario, r.in, r.delivered, r.duplicates, r.lost, r.took.Round(10*time.Millisecond))
	}
	tw.Flush()
}
