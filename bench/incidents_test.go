package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/transport"
)

// The partial-failure scenarios ("incidents"): a broker that fails a share of its
// requests (brownout), one that comes and goes (flapping), callers with different
// deadlines on a slow broker (mixed deadlines), and a broker that is down and then
// back (hard down). incidentCallers callers in a closed loop: each calls again one
// interval (GOODPUT_INTERVAL, 400ms) after its last call started, or at once after a
// slower call, under incidentDeadline unless the scenario says otherwise.
//
// Every column (columns_test.go) runs in a child process of its own (this test
// binary run again with incidentColumnEnv naming the column) against a broker of its
// own, and all the children follow one schedule from one start time, so the columns
// share the machine's load at the same moments. The parent gathers each child's
// record (JSON in a file) and prints one table per broker and scenario:
//
//	GOODPUT=short go test -v -run TestIncidents -timeout 60m .
//	GOODPUT=full GOODPUT_BROKERS=sqs GOODPUT_SCENARIOS=brownout go test -v -run TestIncidents -timeout 60m .
//
// GOODPUT_BROKERS (sqs, kafka, rabbitmq, jetstream), GOODPUT_SCENARIOS (brownout,
// flapping, mixed, harddown) and GOODPUT_SETTINGS (the column names) narrow the run.
const (
	incidentCallers  = 200
	incidentDeadline = 500 * time.Millisecond
	// incidentMargin is the time the children have from their start to be ready for
	// the common start: a process, a broker and a first publish each.
	incidentMargin = 5 * time.Second
	// brokerSample is the resolution of the record of the broker's counts.
	brokerSample = 100 * time.Millisecond
)

// The environment of a child process: the column it runs, the broker and scenario,
// the common start (Unix nanoseconds) and the file its record goes to.
const (
	incidentColumnEnv   = "INCIDENT_COLUMN"
	incidentBrokerEnv   = "INCIDENT_BROKER"
	incidentScenarioEnv = "INCIDENT_SCENARIO"
	incidentStartEnv    = "INCIDENT_START"
	incidentOutEnv      = "INCIDENT_OUT"
)

// conditions are what the fault layers make of a broker during a phase.
type conditions struct {
	fail    float64       // share of requests the broker fails with its own error
	refused bool          // connections reset as they arrive, open ones cut
	latency time.Duration // added to every answer
}

// incidentPhase is a stretch of a scenario under one set of conditions; phases with
// one label are reported together (the up windows of flapping).
type incidentPhase struct {
	label string
	dur   time.Duration
	cond  conditions
}

// callerGroup is a set of callers with one deadline.
type callerGroup struct {
	name     string
	callers  int
	deadline time.Duration
}

// incident is one scenario: its callers, its phases in short and full mode, and the
// figures of its table beyond the ones every table has.
type incident struct {
	name   string
	groups []callerGroup
	phases func(full bool) []incidentPhase
	rows   func(tb *incidentTable)
	// partitions is the Kafka topic's partition count (0 means 1): kafka-go's writer
	// sends one produce request at a time per partition, so a scenario that adds
	// latency needs enough partitions for the broker to be offered its callers' rate.
	partitions int
}

var allCallers = []callerGroup{{name: "callers", callers: incidentCallers, deadline: incidentDeadline}}

var incidents = []incident{
	{name: "brownout", groups: allCallers, phases: brownoutPhases, rows: brownoutRows},
	{name: "flapping", groups: allCallers, phases: flappingPhases, rows: flappingRows},
	{name: "mixed", groups: []callerGroup{
		{name: "50 ms callers", callers: incidentCallers / 2, deadline: 50 * time.Millisecond},
		{name: "2 s callers", callers: incidentCallers / 2, deadline: 2 * time.Second},
	}, phases: mixedPhases, rows: mixedRows, partitions: mixedPartitions},
	{name: "harddown", groups: allCallers, phases: hardDownPhases, rows: hardDownRows},
}

// brownoutShares are the shares of requests the broker fails, phase by phase.
var brownoutShares = []float64{0.1, 0.3, 0.6}

func brownoutPhases(full bool) []incidentPhase {
	each, healthy := 10*time.Second, 10*time.Second
	if full {
		each, healthy = 40*time.Second, 20*time.Second
	}
	var out []incidentPhase
	for _, s := range brownoutShares {
		out = append(out, incidentPhase{label: fmt.Sprintf("%.0f %% failing", 100*s), dur: each, cond: conditions{fail: s}})
	}
	return append(out, incidentPhase{label: "healthy after", dur: healthy})
}

// The flapping broker refuses connections for flapDown, then is up for flapUp.
const (
	flapDown = 3 * time.Second
	flapUp   = 7 * time.Second
)

func flappingPhases(full bool) []incidentPhase {
	warm, cycles := 5*time.Second, 3
	if full {
		warm, cycles = 10*time.Second, 12
	}
	out := []incidentPhase{{label: "healthy warm-up", dur: warm}}
	for range cycles {
		out = append(out, incidentPhase{label: "down", dur: flapDown, cond: conditions{refused: true}},
			incidentPhase{label: "up", dur: flapUp})
	}
	return out
}

// mixedLatency is the broker's latency in the mixed-deadlines scenario.
const mixedLatency = 100 * time.Millisecond

// mixedPartitions spreads the mixed scenario's Kafka calls (about 500 a second, one
// produce request each at a BatchTimeout of 1 ms) over enough partitions that at
// mixedLatency, one request in flight per partition, the writer has about twice the
// capacity the callers need: without a breaker the 2 s callers are then served.
const mixedPartitions = 128

func mixedPhases(full bool) []incidentPhase {
	d := 15 * time.Second
	if full {
		d = 40 * time.Second
	}
	return []incidentPhase{{label: "broker at 100ms", dur: d, cond: conditions{latency: mixedLatency}}}
}

func hardDownPhases(full bool) []incidentPhase {
	// 45 s after the return in full mode: long enough to see a circuit whose probe
	// failed just before the return (a doubled break of about 38 s) recover.
	warm, after := 5*time.Second, 10*time.Second
	if full {
		warm, after = 10*time.Second, 45*time.Second
	}
	return []incidentPhase{
		{label: "healthy warm-up", dur: warm},
		{label: "down", dur: 30 * time.Second, cond: conditions{refused: true}},
		{label: "healthy after", dur: after},
	}
}

// incidentTarget is a column's publisher, its broker's fault layers and the counts
// of what the broker received.
type incidentTarget struct {
	pub   transport.Publisher
	d     transport.Destination
	set   func(conditions)
	count func() brokerCount
}

// brokerCount is what a broker received so far: requests (the fault layer's count),
// how many of them it failed, and the connections it refused.
type brokerCount struct {
	Requests, Failed, Refused int64
}

func (a brokerCount) minus(b brokerCount) brokerCount {
	return brokerCount{a.Requests - b.Requests, a.Failed - b.Failed, a.Refused - b.Refused}
}

// incidentBroker makes a column's target; cannot names the scenarios it cannot make,
// with the reason.
type incidentBroker struct {
	name     string
	unit     string // what Requests counts
	open     func(t *testing.T, reg *registry.Registry, inc incident) incidentTarget
	cannotDo map[string]string
}

var incidentBrokers = []incidentBroker{
	{name: "sqs", unit: "HTTP requests", open: openIncidentSQS},
	{name: "kafka", unit: "produce requests", open: openIncidentKafka},
	{name: "rabbitmq", unit: "KB sent", open: openIncidentRabbit, cannotDo: map[string]string{
		"brownout": "RabbitMQ has no share of publishes to fail: a broker-side limit (a queue's max-length with reject-publish) nacks all or nothing, and failing a share of publishes would take a proxy that parses AMQP frames",
	}},
	{name: "jetstream", unit: "publishes", open: openIncidentJetStream},
}

// proxyConditions applies c's refusals and latency to p (and the share, if the
// broker has a fault layer for it).
func proxyConditions(p *harness.Proxy, setShare func(float64)) func(conditions) {
	return func(c conditions) {
		if setShare != nil {
			setShare(c.fail)
		}
		p.SetLatency(c.latency)
		if c.refused {
			p.RefuseConnections()
		} else {
			p.AcceptConnections()
		}
	}
}

// openIncidentSQS is the SDK's client with its defaults on a fresh SQS test server
// behind an HTTP fault layer that fails with SQS's 503 ServiceUnavailable, behind a
// proxy.
func openIncidentSQS(t *testing.T, reg *registry.Registry, _ incident) incidentTarget {
	queue := slowName()
	client, proxy, fault := harness.FaultedSQS(t, queue, sqstest.ServiceUnavailable)
	pub, err := sqs.NewPublisher(client, reg)
	if err != nil {
		t.Fatal(err)
	}
	return incidentTarget{pub: pub, d: transport.Destination{Broker: sqs.Broker, Name: queue},
		set: proxyConditions(proxy, fault.SetFailShare),
		count: func() brokerCount {
			n, failed := fault.Counts()
			_, refused := proxy.Connections()
			return brokerCount{n, failed, refused}
		}}
}

// openIncidentKafka is openKafka's kafka-go writer on a fresh kfake, with the
// scenario's partitions, whose produce requests fail, a share of them, with
// incidentKafkaError.
func openIncidentKafka(t *testing.T, reg *registry.Registry, inc incident) incidentTarget {
	topic := slowName()
	cluster := harness.KFake(t, kfake.SeedTopics(int32(max(inc.partitions, 1)), topic))
	fault := harness.NewProduceFault(cluster, incidentKafkaError(t))
	tg := kafkaTarget(t, reg, cluster, topic)
	return incidentTarget{pub: tg.pub, d: tg.d, set: proxyConditions(tg.proxy, fault.SetFailShare),
		count: func() brokerCount {
			n, failed := fault.Counts()
			_, refused := tg.proxy.Connections()
			return brokerCount{n, failed, refused}
		}}
}

// incidentKafkaError is the code the brownout's failed produce requests get:
// UNKNOWN_SERVER_ERROR (kfake's default fault; a Failure for the breaker), which
// kafka-go does not retry, so a failure is fast. With
// GOODPUT_KAFKA_ERROR=not-enough-replicas the code is one kafka-go retries: its
// writer then sleeps 100 ms, 400 ms, ... between attempts while the partition's
// later batches (one per BatchTimeout of 1 ms) queue behind, so a publisher
// without a breaker collapses at 10 % failing already, and the row measures
// kafka-go's retry loop rather than any protection.
func incidentKafkaError(t *testing.T) *kerr.Error {
	switch s := os.Getenv("GOODPUT_KAFKA_ERROR"); s {
	case "", "unknown":
		return kerr.UnknownServerError
	case "not-enough-replicas":
		return kerr.NotEnoughReplicas
	default:
		t.Fatalf("GOODPUT_KAFKA_ERROR=%q: want unknown or not-enough-replicas", s)
		return nil
	}
}

// openIncidentRabbit is openRabbit's publisher on the machine's RabbitMQ through a
// proxy; what the broker received is counted in KB sent through the proxy.
func openIncidentRabbit(t *testing.T, reg *registry.Registry, _ incident) incidentTarget {
	tg := openRabbit(t, reg)
	return incidentTarget{pub: tg.pub, d: tg.d, set: proxyConditions(tg.proxy, nil),
		count: func() brokerCount {
			_, refused := tg.proxy.Connections()
			return brokerCount{Requests: tg.proxy.Sent() >> 10, Refused: refused}
		}}
}

// TestIncidents prints, per broker and scenario, the goodput table of every column
// side by side (see the top of this file).
func TestIncidents(t *testing.T) {
	mode := goodputMode(t, "TestIncidents")
	if column := os.Getenv(incidentColumnEnv); column != "" {
		runIncidentChild(t, mode, column)
		return
	}
	for _, b := range incidentBrokers {
		if !selected("GOODPUT_BROKERS", b.name) {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			for _, inc := range incidents {
				if !selected("GOODPUT_SCENARIOS", inc.name) {
					continue
				}
				t.Run(inc.name, func(t *testing.T) {
					if why := b.cannotDo[inc.name]; why != "" {
						t.Skipf("not made on %s: %s", b.name, why)
					}
					emit(t, newIncidentTable(b, inc, mode, runIncidentColumns(t, mode, b, inc)))
				})
			}
		})
	}
}

// childResult is a child's record of its column's run.
type childResult struct {
	Late   time.Duration // from the common start to the child's own
	Groups []groupResult // one per caller group
	Broker []brokerCount // the broker's counts every brokerSample from the start
}

// groupResult is a recorder's figures, as JSON.
type groupResult struct {
	Phases []phaseCounts
	OKAt   []int64
	Errors map[string]int
}

type phaseCounts struct {
	Calls, OK, Refused, FastRefused, Failed, Waited int64
}

// resultOf is what the parent needs of r.
func resultOf(r *recorder) groupResult {
	g := groupResult{Errors: r.errs}
	for i := range r.stats {
		s := &r.stats[i]
		g.Phases = append(g.Phases, phaseCounts{s.calls.Load(), s.ok.Load(), s.refused.Load(), s.fastRefused.Load(), s.failed.Load(), s.waited.Load()})
	}
	for i := range r.okAt {
		g.OKAt = append(g.OKAt, r.okAt[i].Load())
	}
	return g
}

// recorder rebuilds the child's recorder over phases from g, for the figures.
func (g groupResult) recorder(phases []phase) *recorder {
	r := newRecorder(phases)
	for i, p := range g.Phases {
		if i >= len(r.stats) {
			break
		}
		s := &r.stats[i]
		s.calls.Store(p.Calls)
		s.ok.Store(p.OK)
		s.refused.Store(p.Refused)
		s.fastRefused.Store(p.FastRefused)
		s.failed.Store(p.Failed)
		s.waited.Store(p.Waited)
	}
	for i, n := range g.OKAt {
		if i < len(r.okAt) {
			r.okAt[i].Store(n)
		}
	}
	if g.Errors != nil {
		r.errs = g.Errors
	}
	return r
}

// recorderPhases are the recorder's phases of an incident's phases.
func recorderPhases(ps []incidentPhase) []phase {
	out := make([]phase, len(ps))
	for i, p := range ps {
		out[i] = phase{name: p.label, dur: p.dur}
	}
	return out
}

// runIncidentChild runs one column of one scenario on one broker, from the common
// start, and writes its record for the parent.
func runIncidentChild(t *testing.T, mode, column string) {
	var b *incidentBroker
	for i := range incidentBrokers {
		if incidentBrokers[i].name == os.Getenv(incidentBrokerEnv) {
			b = &incidentBrokers[i]
		}
	}
	var inc *incident
	for i := range incidents {
		if incidents[i].name == os.Getenv(incidentScenarioEnv) {
			inc = &incidents[i]
		}
	}
	ns, err := strconv.ParseInt(os.Getenv(incidentStartEnv), 10, 64)
	if b == nil || inc == nil || err != nil {
		t.Fatalf("child of TestIncidents: broker %q, scenario %q, start %q", os.Getenv(incidentBrokerEnv),
			os.Getenv(incidentScenarioEnv), os.Getenv(incidentStartEnv))
	}
	start := time.Unix(0, ns)
	interval := goodputInterval(t)
	reg, err := columnRegistry(column)
	if err != nil {
		t.Fatalf("%s: %v", column, err)
	}
	tg := b.open(t, reg, *inc)
	publish := columnWrap(column, tg.pub.Publish)
	warmUp(t, column, tg)
	if late := time.Since(start); late > 0 {
		t.Fatalf("%s: ready %v after the common start: raise incidentMargin", column, late)
	}
	sleepUntil(context.Background(), start)
	res := childResult{Late: time.Since(start)}
	iphases := inc.phases(mode == "full")
	recs := make([]*recorder, len(inc.groups))
	var wg sync.WaitGroup
	for gi, g := range inc.groups {
		phases := recorderPhases(iphases)
		if gi == 0 { // the first group's recorder sets the conditions for all
			for i := range phases {
				cond := iphases[i].cond
				phases[i].apply = func() { tg.set(cond) }
			}
		}
		recs[gi] = newRecorder(phases)
		wg.Add(1)
		go func() {
			defer wg.Done()
			drive(t, recs[gi], g.callers, interval, func(ctx context.Context, caller int, msg []byte) error {
				return publish(ctx, tg.d, transport.Message{Key: []byte(g.name + strconv.Itoa(caller)), Value: msg})
			}, g.deadline, 100)
		}()
	}
	res.Broker = sampleBroker(start, recs[0].total(), tg.count)
	wg.Wait()
	tg.set(conditions{})
	for _, r := range recs {
		res.Groups = append(res.Groups, resultOf(r))
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv(incidentOutEnv), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// warmUp publishes a few messages at once before the schedule, not recorded, so
// that every column starts with its client connected (a few connections, as many
// as the SDK's HTTP client keeps idle) and its destination resolved.
func warmUp(t *testing.T, column string, tg incidentTarget) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := make(chan error, 10)
	for range cap(errs) {
		go func() { errs <- tg.pub.Publish(ctx, tg.d, transport.Message{Value: []byte("warm-up")}) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Fatalf("%s: a publish before the schedule: %v", column, err)
		}
	}
}

// sampleBroker returns the broker's counts at every brokerSample from start to
// start+total.
func sampleBroker(start time.Time, total time.Duration, count func() brokerCount) []brokerCount {
	var out []brokerCount
	for k := time.Duration(0); k*brokerSample <= total; k++ {
		sleepUntil(context.Background(), start.Add(k*brokerSample))
		out = append(out, count())
	}
	return out
}

// columnRun is one column's run as the parent sees it.
type columnRun struct {
	name    string
	groups  []*recorder
	broker  []brokerCount
	late    time.Duration
	missing string // why there is no result
}

// brokerAt returns the broker's counts at offset d from the start.
func (c *columnRun) brokerAt(d time.Duration) brokerCount {
	if len(c.broker) == 0 {
		return brokerCount{}
	}
	return c.broker[min(max(int(d/brokerSample), 0), len(c.broker)-1)]
}

// brokerIn returns what the broker received inside [from, to).
func (c *columnRun) brokerIn(from, to time.Duration) brokerCount {
	return c.brokerAt(to).minus(c.brokerAt(from))
}

// runIncidentColumns runs every selected column of inc on b, each in a child
// process, on one schedule, and returns their runs.
func runIncidentColumns(t *testing.T, mode string, b incidentBroker, inc incident) []*columnRun {
	t.Helper()
	dir := t.TempDir()
	start := time.Now().Add(incidentMargin)
	phases := recorderPhases(inc.phases(mode == "full"))
	type child struct {
		cmd *exec.Cmd
		out bytes.Buffer
		res string
	}
	var runs []*columnRun
	var children []*child
	for i, column := range incidentColumns {
		if !selected("GOODPUT_SETTINGS", column) {
			continue
		}
		c := &child{res: filepath.Join(dir, fmt.Sprintf("column-%d.json", i))}
		c.cmd = exec.Command(os.Args[0], "-test.run=^TestIncidents$", "-test.timeout=30m")
		c.cmd.Env = append(os.Environ(), incidentColumnEnv+"="+column, incidentBrokerEnv+"="+b.name,
			incidentScenarioEnv+"="+inc.name, incidentStartEnv+"="+strconv.FormatInt(start.UnixNano(), 10),
			incidentOutEnv+"="+c.res)
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children = append(children, c)
		runs = append(runs, &columnRun{name: column})
	}
	errs := make([]error, len(children))
	for i, c := range children {
		errs[i] = c.cmd.Wait() // all of them, before any is judged
	}
	for i, c := range children {
		run, err := runs[i], errs[i]
		data, rerr := os.ReadFile(c.res)
		if err != nil || rerr != nil {
			run.missing = "no result"
			out := c.out.String()
			if len(out) > 4000 {
				out = "…" + out[len(out)-4000:]
			}
			if strings.Contains(out, "--- SKIP") {
				t.Skipf("%s: the child skipped:\n%s", run.name, out)
			}
			t.Errorf("%s: %v\n%s", run.name, err, out)
			continue
		}
		var res childResult
		if err := json.Unmarshal(data, &res); err != nil {
			t.Fatalf("%s: %v", run.name, err)
		}
		run.late, run.broker = res.Late, res.Broker
		for _, g := range res.Groups {
			run.groups = append(run.groups, g.recorder(phases))
		}
		if os.Getenv("GOODPUT_TRACE") != "" {
			r := run.groups[0]
			var b strings.Builder
			for s := time.Duration(0); s < r.total(); s += time.Second {
				fmt.Fprintf(&b, " %.0f", r.okRate(s, s+time.Second))
			}
			t.Logf("%s: successes per second:%s", run.name, b.String())
			var at time.Duration
			for i, p := range inc.phases(mode == "full") {
				if i > 0 && p.cond == (conditions{}) {
					var e strings.Builder
					for s := at - 500*time.Millisecond; s < at+2*time.Second; s += 100 * time.Millisecond {
						c := run.brokerIn(s, s+100*time.Millisecond)
						fmt.Fprintf(&e, " %.0f[%d]", r.okRate(s, s+100*time.Millisecond)/10, c.Requests+c.Refused)
					}
					t.Logf("%s: edge at %v, successes[broker] per 100 ms from 0.5 s before:%s", run.name, at, e.String())
				}
				at += p.dur
			}
		}
	}
	return runs
}

// incidentTable is one scenario's table under construction, with what its rows need.
type incidentTable struct {
	*table
	b      incidentBroker
	inc    incident
	phases []incidentPhase
	runs   []*columnRun
	base   *columnRun // no breaker's run, for the ratios; nil if it did not run
}

func newIncidentTable(b incidentBroker, inc incident, mode string, runs []*columnRun) *table {
	phases := inc.phases(mode == "full")
	var callers []string
	for _, g := range inc.groups {
		callers = append(callers, fmt.Sprintf("%d %s with %v deadlines", g.callers, g.name, g.deadline))
	}
	var list []string
	for _, l := range labels(phases) {
		n, d := 0, time.Duration(0)
		for _, p := range phases {
			if p.label == l {
				n++
				d = p.dur
			}
		}
		if n > 1 {
			list = append(list, fmt.Sprintf("%d × %s %v", n, l, d))
		} else {
			list = append(list, fmt.Sprintf("%s %v", l, d))
		}
	}
	skew := time.Duration(0)
	for _, r := range runs {
		skew = max(skew, r.late)
	}
	tb := &incidentTable{
		table: &table{
			title: fmt.Sprintf("**%s, %s**: %s, each calling again one interval after its last call started; %s; columns in child processes on one schedule (started within %v of it); %s; %s",
				b.name, inc.name, strings.Join(callers, " and "), strings.Join(list, ", "), skew.Round(time.Millisecond),
				time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadNote()),
			head: []string{"figure", "target"},
		},
		b: b, inc: inc, phases: phases, runs: runs,
	}
	for _, r := range runs {
		tb.head = append(tb.head, r.name)
		if r.name == colNone && r.missing == "" {
			tb.base = r
		}
	}
	inc.rows(tb)
	tb.brokerRows()
	tb.row("most frequent failures", "", func(r *columnRun) string {
		var out []string
		for g, rec := range r.groups {
			if len(r.groups) > 1 {
				out = append(out, inc.groups[g].name+": "+rec.topErrors(2))
			} else {
				out = append(out, rec.topErrors(2))
			}
		}
		return strings.Join(out, "; ")
	})
	return tb.table
}

// labels returns the phases' labels in order of first appearance.
func labels(phases []incidentPhase) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range phases {
		if !seen[p.label] {
			seen[p.label] = true
			out = append(out, p.label)
		}
	}
	return out
}

// row adds a figure with a cell per column.
func (tb *incidentTable) row(figure, target string, cell func(r *columnRun) string) {
	cells := []string{figure, target}
	for _, r := range tb.runs {
		if r.missing != "" {
			cells = append(cells, r.missing)
			continue
		}
		cells = append(cells, cell(r))
	}
	tb.add(cells...)
}

// spans returns the [from, to) of the phases labelled label.
func (tb *incidentTable) spans(label string) [][2]time.Duration {
	var out [][2]time.Duration
	var at time.Duration
	for _, p := range tb.phases {
		if p.label == label {
			out = append(out, [2]time.Duration{at, at + p.dur})
		}
		at += p.dur
	}
	return out
}

// goodput returns group g's successes within the deadline and calls over the phases
// labelled label (every phase but the first when label is "").
func (tb *incidentTable) goodput(r *columnRun, g int, label string) (ok, calls int64) {
	for i, p := range tb.phases {
		if p.label == label || label == "" && i > 0 {
			ok += r.groups[g].stats[i].ok.Load()
			calls += r.groups[g].stats[i].calls.Load()
		}
	}
	return ok, calls
}

// share is ok/calls, 0 without calls.
func share(ok, calls int64) float64 {
	if calls == 0 {
		return 0
	}
	return float64(ok) / float64(calls)
}

// goodputRow adds group g's goodput over the phases labelled label, with its ratio to
// no breaker's.
func (tb *incidentTable) goodputRow(figure, target string, g int, label string) {
	tb.row(figure, target, func(r *columnRun) string {
		ok, calls := tb.goodput(r, g, label)
		cell := pct(ok, calls)
		if tb.base != nil && r != tb.base {
			if b := share(tb.goodput(tb.base, g, label)); b > 0 {
				cell += fmt.Sprintf("; **%.2f×**", share(ok, calls)/b)
			}
		}
		return cell
	})
}

// refusalRow adds the share of group 0's calls over the phases labelled label that
// the protection refused, and how many of those refusals came within 10 ms.
func (tb *incidentTable) refusalRow(figure, target, label string) {
	tb.row(figure, target, func(r *columnRun) string {
		var refused, fast, calls int64
		for i, p := range tb.phases {
			if p.label == label {
				s := &r.groups[0].stats[i]
				refused += s.refused.Load()
				fast += s.fastRefused.Load()
				calls += s.calls.Load()
			}
		}
		if refused == 0 {
			return "none refused"
		}
		return fmt.Sprintf("%s refused; %s of them within 10 ms", pct(refused, calls), pct(fast, refused))
	})
}

// brokerRows adds what the broker received in each kind of phase.
func (tb *incidentTable) brokerRows() {
	for _, l := range labels(tb.phases) {
		spans := tb.spans(l)
		tb.row(fmt.Sprintf("broker received, %s: %s (failed by the fault layer); connections refused", l, tb.b.unit), "",
			func(r *columnRun) string {
				var c brokerCount
				var d time.Duration
				for _, s := range spans {
					c = addCounts(c, r.brokerIn(s[0], s[1]))
					d += s[1] - s[0]
				}
				return fmt.Sprintf("%d (%d); %d — %.1f/s", c.Requests, c.Failed, c.Refused, float64(c.Requests+c.Refused)/d.Seconds())
			})
	}
}

func addCounts(a, b brokerCount) brokerCount {
	return brokerCount{a.Requests + b.Requests, a.Failed + b.Failed, a.Refused + b.Refused}
}

func brownoutRows(tb *incidentTable) {
	for _, l := range labels(tb.phases) {
		tb.goodputRow("goodput, "+l, "DefaultPolicy ≥ 0.95× no breaker", 0, l)
	}
	for _, l := range labels(tb.phases) {
		tb.refusalRow("calls refused by the protection, "+l, "", l)
	}
}

func flappingRows(tb *incidentTable) {
	tb.goodputRow("goodput overall (every cycle)", "DefaultPolicy ≥ 0.9× no breaker", 0, "")
	tb.goodputRow("goodput in the up windows", "", 0, "up")
	ups := tb.spans("up")
	need := (10*len(ups) + 11) / 12
	tb.row("up-edges after which the first second brought 90 % of the healthy rate", fmt.Sprintf("≥ %d of %d", need, len(ups)),
		func(r *columnRun) string {
			rec := r.groups[0]
			rate := healthyRate(rec)
			n := 0
			for _, s := range ups {
				if rec.okRate(s[0], s[0]+time.Second) >= 0.9*rate {
					n++
				}
			}
			return fmt.Sprintf("%d of %d (healthy %.0f/s)", n, len(ups), rate)
		})
	tb.refusalRow("calls refused by the protection, down windows", "", "down")
	tb.refusalRow("calls refused by the protection, up windows", "", "up")
}

func mixedRows(tb *incidentTable) {
	l := tb.phases[0].label
	for g, grp := range tb.inc.groups {
		target := ""
		if grp.deadline >= time.Second {
			target = "DefaultPolicy ≥ 0.95× no breaker"
		}
		tb.goodputRow("goodput, "+grp.name, target, g, l)
	}
	for g, grp := range tb.inc.groups {
		tb.row("calls refused by the protection, "+grp.name, "", func(r *columnRun) string {
			s := &r.groups[g].stats[0]
			return pct(s.refused.Load(), s.calls.Load())
		})
	}
}

func hardDownRows(tb *incidentTable) {
	for _, l := range labels(tb.phases) {
		tb.goodputRow("goodput, "+l, "", 0, l)
	}
	last := len(tb.phases) - 1
	tb.row("seconds to 90 % of the healthy rate after the broker's return (1 s windows)", "DefaultPolicy ≤ 2 s", func(r *columnRun) string {
		rec := r.groups[0]
		rate := healthyRate(rec)
		if rate < 1 {
			return "no healthy rate to reach"
		}
		d, ok := rec.recovery(last, rate, 0.9, time.Second)
		if !ok {
			return fmt.Sprintf("not within %v (healthy %.0f/s)", tb.phases[last].dur, rate)
		}
		return fmt.Sprintf("%.2f s (healthy %.0f/s)", d.Seconds(), rate)
	})
	down := tb.spans("down")[0]
	tb.row(fmt.Sprintf("broker received while down, per second: %s + connections; whole phase / after its first second", tb.b.unit), "DefaultPolicy ≤ 2/s",
		func(r *columnRun) string {
			per := func(from time.Duration) float64 {
				c := r.brokerIn(from, down[1])
				return float64(c.Requests+c.Refused) / (down[1] - from).Seconds()
			}
			return fmt.Sprintf("%.1f / %.1f", per(down[0]), per(down[0]+time.Second))
		})
	tb.refusalRow("calls refused by the protection while down", "DefaultPolicy: ≥ 95 % of refusals within 10 ms", "down")
}
