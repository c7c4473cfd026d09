package bench

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The recovery trace (GOODPUT_TRACE=1): what happens around the start of the slow
// broker's last phase, the recovery, for the figure "time to 90 % of the healthy
// rate": the successes, refusals and failures per 10ms bucket for the first 1.5s,
// the circuit's transitions, and every admitted call that started from 1s before the
// recovery to 200ms after it or took over 20ms, with its duration and error.

// prbTraceOn reports whether GOODPUT_TRACE asks for the trace.
func prbTraceOn() bool { return os.Getenv("GOODPUT_TRACE") != "" }

// prbTracer keeps the transitions and the calls near the recovery.
type prbTracer struct {
	mu    sync.Mutex
	start time.Time // the recorder's start, set by drive before any call
	trans []string
	calls []prbCall
}

type prbCall struct {
	start, took time.Duration
	refused     bool
	err         string
}

// option is the registry option that records the transitions.
func (tr *prbTracer) option() registry.Option {
	return registry.WithObserver(func(_ transport.Destination, t breaker.Transition) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.start.IsZero() {
			return
		}
		tr.trans = append(tr.trans, fmt.Sprintf("%9.3fs %v→%v gen %d (%s)", t.At.Sub(tr.start).Seconds(), t.From, t.To, t.Generation, t.Reason))
	})
}

// call records one call.
func (tr *prbTracer) call(start, took time.Duration, err error, refused bool) {
	text := ""
	if err != nil {
		text = err.Error()
		if len(text) > 120 {
			text = text[:120]
		}
		var oe *breaker.OpenError
		if errors.As(err, &oe) {
			text += fmt.Sprintf(" [NotBefore +%.3fs]", oe.NotBefore.Sub(tr.start).Seconds())
		}
	}
	tr.mu.Lock()
	tr.calls = append(tr.calls, prbCall{start, took, refused, text})
	tr.mu.Unlock()
}

// report prints the trace around rec's last phase.
func (tr *prbTracer) report(name string, rec *recorder) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	last := len(rec.ends) - 1
	rec0 := rec.ends[last] - rec.phases[last].dur
	var b strings.Builder
	fmt.Fprintf(&b, "\n--- recovery trace: %s, recovery at %.3fs\n", name, rec0.Seconds())
	const span = 1500 * time.Millisecond
	nb := int(span / bucket)
	ok, ref, fail := make([]int, nb), make([]int, nb), make([]int, nb)
	for _, c := range tr.calls {
		end := c.start + c.took
		if c.refused {
			if i := int((c.start - rec0) / bucket); c.start >= rec0 && i < nb {
				ref[i]++
			}
			continue
		}
		i := int((end - rec0) / bucket)
		if end < rec0 || i >= nb {
			continue
		}
		if c.err == "" && c.took <= slowDeadline {
			ok[i]++
		} else {
			fail[i]++
		}
	}
	var lastRef time.Duration = -1
	refAfter, ok1s := 0, 0
	for _, c := range tr.calls {
		if c.refused && c.start >= rec0 && c.start < rec0+span {
			refAfter++
			lastRef = max(lastRef, c.start-rec0)
		}
		if end := c.start + c.took; !c.refused && c.err == "" && c.took <= slowDeadline && end >= rec0 && end < rec0+time.Second {
			ok1s++
		}
	}
	fmt.Fprintf(&b, "SUMMARY %s: last refusal at +%.0fms, %d refusals in the first %v, %d successes in the first 1s (healthy %.0f/s)\n",
		name, float64(lastRef)/float64(time.Millisecond), refAfter, span, ok1s, healthyRate(rec))
	cum := 0
	for i := range nb {
		cum += ok[i]
		fmt.Fprintf(&b, "  +%4dms ok %3d refused %3d failed %3d (ok so far %4d)\n", i*int(bucket/time.Millisecond), ok[i], ref[i], fail[i], cum)
	}
	hang := rec.ends[last-1] - rec.phases[last-1].dur
	b.WriteString("  transitions from the start of the hang:\n")
	for _, t := range tr.trans {
		var at float64
		fmt.Sscanf(strings.TrimSpace(t), "%fs", &at)
		if at >= hang.Seconds() && at <= (rec0+span).Seconds() {
			fmt.Fprintf(&b, "    %s\n", t)
		}
	}
	b.WriteString("  admitted calls from the start of the hang (start, took, error):\n")
	sort.Slice(tr.calls, func(i, j int) bool { return tr.calls[i].start < tr.calls[j].start })
	for _, c := range tr.calls {
		if c.refused || c.start < hang || c.start > rec0+span {
			continue
		}
		if c.start > rec0+200*time.Millisecond && c.took <= 20*time.Millisecond {
			continue
		}
		fmt.Fprintf(&b, "    %9.3fs %8.1fms %s\n", c.start.Seconds(), float64(c.took)/float64(time.Millisecond), c.err)
	}
	b.WriteString("  first refusals after the recovery:\n")
	n := 0
	for _, c := range tr.calls {
		if c.refused && c.start >= rec0 && n < 5 {
			n++
			fmt.Fprintf(&b, "    %9.3fs %s\n", c.start.Seconds(), c.err)
		}
	}
	fmt.Print(b.String())
}
