package bench

// The goodput scenarios (slowbroker_test.go, drain_test.go) share what is here: the
// opt-in switch, the phases, the record of every call and the tables. They are long
// runs against real servers through a shaping TCP proxy, so they run only when asked:
//
//	GOODPUT=short go test -v -run TestSlowBroker -timeout 30m .
//	GOODPUT=full  go test -v -run TestDrain -timeout 60m .
//
// GOODPUT_PHASES overrides the phase durations (comma-separated Go durations), and
// GOODPUT_OUT names a file the tables are appended to as Markdown.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/sony/gobreaker/v2"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
)

// goodputMode returns "short" or "full" from GOODPUT, and skips the test otherwise.
func goodputMode(t *testing.T, test string) string {
	t.Helper()
	switch m := os.Getenv("GOODPUT"); m {
	case "short", "full":
		return m
	case "":
		t.Skipf("a long goodput scenario: run it with GOODPUT=short (or full) go test -v -run %s -timeout 60m ./bench", test)
	default:
		t.Fatalf("GOODPUT=%q: want short or full", m)
	}
	return ""
}

// phase is a stretch of a scenario with its own conditions.
type phase struct {
	name  string
	dur   time.Duration
	apply func() // sets the phase's conditions when it starts
}

// phaseDurations returns the durations of n phases: GOODPUT_PHASES when set, else the
// mode's defaults.
func phaseDurations(t *testing.T, mode string, short, full []time.Duration) []time.Duration {
	t.Helper()
	out := full
	if mode == "short" {
		out = short
	}
	if s := os.Getenv("GOODPUT_PHASES"); s != "" {
		parts := strings.Split(s, ",")
		if len(parts) != len(full) {
			t.Fatalf("GOODPUT_PHASES=%q: want %d durations", s, len(full))
		}
		out = make([]time.Duration, len(parts))
		for i, p := range parts {
			d, err := time.ParseDuration(strings.TrimSpace(p))
			if err != nil || d <= 0 {
				t.Fatalf("GOODPUT_PHASES=%q: %q is not a positive duration", s, p)
			}
			out[i] = d
		}
	}
	return out
}

// selected reports whether name is in the comma-separated list of env, or env is unset.
func selected(env, name string) bool {
	s := os.Getenv(env)
	if s == "" {
		return true
	}
	for p := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(p) == name {
			return true
		}
	}
	return false
}

// refused reports whether err is a refusal without a call to the broker: a circuit's
// (or a ramp's, or a limit's), failsafe-go's limiter's or gobreaker's.
func refused(err error) bool {
	var rej *registry.RejectedError
	return errors.As(err, &rej) || errors.Is(err, breaker.ErrOpen) || errors.Is(err, breaker.ErrSaturated) ||
		errors.Is(err, adaptivelimiter.ErrExceeded) ||
		errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// goodputInterval is the pause between one caller's calls: GOODPUT_INTERVAL, or 400ms.
func goodputInterval(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("GOODPUT_INTERVAL")
	if s == "" {
		return 400 * time.Millisecond
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("GOODPUT_INTERVAL=%q: not a positive duration", s)
	}
	return d
}

// fastRefusal is the time within which a refusal counts as failing fast.
const fastRefusal = 10 * time.Millisecond

// earlyWindow is the start-up time in which a healthy broker's calls must not be
// refused.
const earlyWindow = 10 * time.Second

// bucket is the resolution of the record of successes over time.
const bucket = 10 * time.Millisecond

// phaseStats is what a recorder keeps of the calls that started in one phase.
type phaseStats struct {
	calls, ok, refused, fastRefused, failed atomic.Int64
	waited                                  atomic.Int64 // failed calls that took the whole deadline
	maxInFlight, maxGoroutines              atomic.Int64
	maxSettled                              atomic.Int64 // maxInFlight from two deadlines into the phase on
	inFlightSum, samples                    atomic.Int64
}

// recorder keeps what a scenario's callers saw, by the phase their call started in,
// and every success by the time it ended.
type recorder struct {
	start     time.Time
	phases    []phase
	ends      []time.Duration // the end of each phase from start
	stats     []phaseStats
	okAt      []atomic.Int64 // successes within the deadline by bucket of their end
	flightAt  []atomic.Int64 // the calls in flight by bucket: sum of the samples
	samplesAt []atomic.Int64 // the samples by bucket
	inFlight  atomic.Int64   // calls in Publish now
	early     atomic.Int64   // refusals of calls that started in the first earlyWindow
	errMu     sync.Mutex
	errs      map[string]int // failures by their text's first 100 characters
	trace     *prbTracer     // GOODPUT_TRACE: the calls near the recovery; nil otherwise
	admitted  []span         // the calls that were not refused, guarded by errMu
}

// span is when a call ran, from the start of the run.
type span struct{ from, to time.Duration }

func newRecorder(phases []phase) *recorder {
	r := &recorder{phases: phases, stats: make([]phaseStats, len(phases)), errs: map[string]int{}}
	var total time.Duration
	for _, p := range phases {
		total += p.dur
		r.ends = append(r.ends, total)
	}
	r.okAt = make([]atomic.Int64, int(total/bucket)+2)
	r.flightAt = make([]atomic.Int64, len(r.okAt))
	r.samplesAt = make([]atomic.Int64, len(r.okAt))
	return r
}

func (r *recorder) total() time.Duration { return r.ends[len(r.ends)-1] }

// phaseAt returns the phase in force at offset d from the start (the last for later).
func (r *recorder) phaseAt(d time.Duration) int {
	for i, e := range r.ends {
		if d < e {
			return i
		}
	}
	return len(r.ends) - 1
}

// run applies each phase in turn until the last ends, sampling the calls in flight
// and the goroutines every 5ms; it returns when the last phase is over or ctx ends.
// The caller sets r.start first (drive does), before any call is recorded.
func (r *recorder) run(ctx context.Context) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	cur := -1
	for {
		el := time.Since(r.start)
		if el >= r.total() || ctx.Err() != nil {
			return
		}
		if i := r.phaseAt(el); i != cur {
			cur = i
			if f := r.phases[i].apply; f != nil {
				f()
			}
		}
		s := &r.stats[cur]
		n := r.inFlight.Load()
		s.inFlightSum.Add(n)
		s.samples.Add(1)
		if b := int(el / bucket); b < len(r.flightAt) {
			r.flightAt[b].Add(n)
			r.samplesAt[b].Add(1)
		}
		raise(&s.maxGoroutines, int64(runtime.NumGoroutine()))
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// raise sets m to v if v is greater.
func raise(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

// call runs one publish under a deadline and records it.
func (r *recorder) call(deadline time.Duration, publish func(context.Context) error) {
	startOff := time.Since(r.start)
	i := r.phaseAt(startOff)
	s := &r.stats[i]
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	n := r.inFlight.Add(1)
	raise(&s.maxInFlight, n)
	if startOff-(r.ends[i]-r.phases[i].dur) >= 2*deadline {
		// The calls admitted before the phase's first deadline could end (the
		// first evidence of its latency) are over: what is in flight now is what the
		// protection admits at this phase's latency.
		raise(&s.maxSettled, n)
	}
	begin := time.Now()
	err := publish(ctx)
	took := time.Since(begin)
	r.inFlight.Add(-1)
	cancel()
	s.calls.Add(1)
	admitted := true
	defer func() {
		if admitted {
			r.errMu.Lock()
			r.admitted = append(r.admitted, span{startOff, startOff + took})
			r.errMu.Unlock()
		}
	}()
	if r.trace != nil {
		r.trace.call(startOff, took, err, refused(err))
	}
	switch {
	case err == nil && took <= deadline:
		s.ok.Add(1)
		if b := int((startOff + took) / bucket); b < len(r.okAt) {
			r.okAt[b].Add(1)
		}
	case refused(err):
		s.refused.Add(1)
		admitted = false
		if startOff < earlyWindow {
			r.early.Add(1)
		}
		if took <= fastRefusal {
			s.fastRefused.Add(1)
		}
	default:
		s.failed.Add(1)
		if took >= deadline {
			s.waited.Add(1)
		}
		text := "late success"
		if err != nil {
			text = err.Error()
		}
		if len(text) > 100 {
			text = text[:100]
		}
		r.errMu.Lock()
		r.errs[text]++
		r.errMu.Unlock()
	}
}

// okRate returns the successes per second that ended inside [from, to).
func (r *recorder) okRate(from, to time.Duration) float64 {
	var n int64
	for b := int(from / bucket); b < int(to/bucket) && b < len(r.okAt); b++ {
		n += r.okAt[b].Load()
	}
	return float64(n) / (to - from).Seconds()
}

// meanInFlight returns the mean of the calls in flight sampled inside [from, to).
func (r *recorder) meanInFlight(from, to time.Duration) float64 {
	var sum, n int64
	for b := int(from / bucket); b < int(to/bucket) && b < len(r.flightAt); b++ {
		sum += r.flightAt[b].Load()
		n += r.samplesAt[b].Load()
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// recovery returns how long after the start of phase i the success rate over a
// window first reached share of rate, and false if it never did in that phase.
func (r *recorder) recovery(i int, rate, share float64, window time.Duration) (time.Duration, bool) {
	from := r.ends[i] - r.phases[i].dur
	for end := from + window; end <= r.ends[i]; end += bucket {
		if r.okRate(end-window, end) >= share*rate {
			return end - from, true
		}
	}
	return 0, false
}

// topErrors returns the n most frequent failure texts with their counts.
func (r *recorder) topErrors(n int) string {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range r.errs {
		all = append(all, kv{k, v})
	}
	for i := range all { // few entries: a selection sort is enough
		for j := i + 1; j < len(all); j++ {
			if all[j].v > all[i].v {
				all[i], all[j] = all[j], all[i]
			}
		}
	}
	var b strings.Builder
	for i, e := range all {
		if i == n {
			break
		}
		fmt.Fprintf(&b, "%dx %q; ", e.v, e.k)
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// pct formats a share of n in d as a percentage with the raw counts.
func pct(n, d int64) string {
	if d == 0 {
		return "— (0 calls)"
	}
	return fmt.Sprintf("%.1f %% (%d/%d)", 100*float64(n)/float64(d), n, d)
}

// table is a Markdown table built row by row.
type table struct {
	title string
	head  []string
	rows  [][]string
}

func (tb *table) add(cells ...string) { tb.rows = append(tb.rows, cells) }

// String renders the table in Markdown.
func (tb *table) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n\n| %s |\n|%s\n", tb.title, strings.Join(tb.head, " | "), strings.Repeat("---|", len(tb.head)))
	for _, r := range tb.rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(r, " | "))
	}
	return b.String()
}

// emit prints tb and appends it to GOODPUT_OUT when that is set.
func emit(t *testing.T, tb *table) {
	t.Helper()
	s := tb.String()
	fmt.Print(s)
	if path := os.Getenv("GOODPUT_OUT"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
}

// loadNote says how loaded the machine was when a table was measured.
func loadNote() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return fmt.Sprintf("%d CPUs", runtime.NumCPU())
	}
	f := strings.Fields(string(b))
	return fmt.Sprintf("%d CPUs, load average %s %s %s", runtime.NumCPU(), f[0], f[1], f[2])
}

// admittedInFlight returns the most calls that were admitted (not refused) and in
// flight at once at any time in [from, to), and their mean number over it. Unlike
// the sampled count of callers inside Publish, it leaves out callers who were
// being refused at that moment.
func (r *recorder) admittedInFlight(from, to time.Duration) (most int, mean float64) {
	type edge struct {
		at    time.Duration
		delta int
	}
	r.errMu.Lock()
	var edges []edge
	var busy time.Duration
	for _, sp := range r.admitted {
		if sp.to <= from || sp.from >= to {
			continue
		}
		edges = append(edges, edge{max(sp.from, from), 1}, edge{min(sp.to, to), -1})
		busy += min(sp.to, to) - max(sp.from, from)
	}
	r.errMu.Unlock()
	// Ends before starts at the same instant: a call that ended as another began
	// was not in flight with it.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most, float64(busy) / float64(to-from)
}
