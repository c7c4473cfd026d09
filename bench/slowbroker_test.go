package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/transport"
)

// The slow-broker scenario: 200 callers with 500ms deadlines publish to
// one destination whose broker slows down without any error, through a proxy that
// adds latency in phases 1ms -> 300ms -> 2s -> 30s -> 1ms. Each setting runs
// against a fresh broker (kfake, a fresh exchange on the machine's RabbitMQ, a fresh
// SQS test server), one after the other, in one test run.
const (
	slowCallers  = 200
	slowDeadline = 500 * time.Millisecond
)

// slowLatencies are the latency of each phase.
var slowLatencies = []time.Duration{time.Millisecond, 300 * time.Millisecond, 2 * time.Second, 30 * time.Second, time.Millisecond}

var (
	slowShort = []time.Duration{time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second}
	slowFull  = []time.Duration{15 * time.Second, 30 * time.Second, 30 * time.Second, 40 * time.Second, 60 * time.Second}
)

// setting is one column: how the publisher is protected.
type setting struct {
	name     string
	policy   registry.Policy
	opts     []registry.Option
	failsafe bool // wrap the unprotected publisher in failsafe-go's adaptive limiter
	missing  string
}

// readmePolicy is the policy of the README's first example: consecutive counting.
var readmePolicy = registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: 30 * time.Second, Jitter: 0.2}}

// noBreaker is the policy of a circuit that never refuses: the "no breaker" columns
// publish through the same adapter with it, so that only the protection differs.
func noBreaker() registry.Policy { return registry.Policy{Circuit: breaker.DisabledPolicy()} }

func slowSettings() []setting {
	adaptive := setting{name: "adaptive (limit)"}
	if p, opts, ok := adaptiveSetting(); ok {
		adaptive.policy, adaptive.opts = p, opts
	} else {
		adaptive.missing = "not built yet"
	}
	all := []setting{
		{name: "no breaker", policy: noBreaker()},
		{name: "README policy", policy: readmePolicy},
		adaptive,
		{name: "failsafe-go adaptivelimiter", policy: noBreaker(), failsafe: true},
	}
	var out []setting
	for _, s := range all {
		if selected("GOODPUT_SETTINGS", s.name) {
			out = append(out, s)
		}
	}
	return out
}

// slowTarget is a publisher under test, the proxy in front of its broker, and what to
// release when the setting's run is over.
type slowTarget struct {
	pub   transport.Publisher
	d     transport.Destination
	proxy *harness.Proxy
}

// slowBrokers are the brokers of the scenario, each making a fresh target per setting.
var slowBrokers = []struct {
	name string
	open func(t *testing.T, reg *registry.Registry) slowTarget
}{
	{"kafka", openKafka},
	{"rabbitmq", openRabbit},
	{"sqs", openSQS},
}

// TestSlowBroker prints, per broker, the goodput table with every setting
// side by side. GOODPUT_BROKERS and GOODPUT_SETTINGS (comma-separated names) narrow
// the run; GOODPUT_INTERVAL is the pause between one caller's calls (default 400ms).
func TestSlowBroker(t *testing.T) {
	mode := goodputMode(t, "TestSlowBroker")
	durs := phaseDurations(t, mode, slowShort, slowFull)
	interval := goodputInterval(t)
	for _, b := range slowBrokers {
		if !selected("GOODPUT_BROKERS", b.name) {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			settings := slowSettings()
			recs := make([]*recorder, len(settings))
			for i, s := range settings {
				if s.missing != "" {
					continue
				}
				t.Run(s.name, func(t *testing.T) {
					recs[i] = runSlow(t, b.open, s, durs, interval)
				})
			}
			emit(t, slowTable(b.name, settings, recs, durs, interval))
		})
	}
}

// runSlow runs the phases against a fresh target protected by s.
func runSlow(t *testing.T, open func(*testing.T, *registry.Registry) slowTarget, s setting, durs []time.Duration, interval time.Duration) *recorder {
	opts := s.opts
	var tr *prbTracer
	if prbTraceOn() {
		tr = &prbTracer{}
		opts = append(opts[:len(opts):len(opts)], tr.option())
	}
	reg, err := registry.New(s.policy, opts...)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	tg := open(t, reg)
	publish := tg.pub.Publish
	if s.failsafe {
		publish = withFailsafeLimiter(publish)
	}
	phases := make([]phase, len(durs))
	for i, d := range durs {
		lat := slowLatencies[i]
		phases[i] = phase{name: lat.String(), dur: d, apply: func() { tg.proxy.SetLatency(lat) }}
	}
	rec := newRecorder(phases)
	rec.trace = tr
	drive(t, rec, slowCallers, interval, func(ctx context.Context, caller int, msg []byte) error {
		return publish(ctx, tg.d, transport.Message{Key: []byte("k" + strconv.Itoa(caller)), Value: msg})
	}, slowDeadline, 100)
	tg.proxy.SetLatency(0)
	if tr != nil {
		tr.report(s.name, rec)
	}
	return rec
}

// drive runs callers, each publishing a msgSize-byte message every interval (at once
// after a call that took longer) under deadline, while rec applies its phases. It
// returns when every caller's last call has returned.
func drive(t *testing.T, rec *recorder, callers int, interval time.Duration, publish func(ctx context.Context, caller int, msg []byte) error, deadline time.Duration, msgSize int) {
	t.Helper()
	msg := make([]byte, msgSize)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	rec.start = time.Now()
	if rec.trace != nil {
		rec.trace.mu.Lock()
		rec.trace.start = rec.start
		rec.trace.mu.Unlock()
	}
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := rec.start.Add(rand.N(interval)) // callers spread over one interval
			for {
				if !sleepUntil(ctx, next) || time.Since(rec.start) >= rec.total() {
					return
				}
				next = next.Add(interval)
				rec.call(deadline, func(ctx context.Context) error { return publish(ctx, c, msg) })
				if now := time.Now(); next.Before(now) {
					next = now // no burst to catch up after a slow call
				}
			}
		}()
	}
	rec.run(ctx)
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Errorf("callers still in Publish a minute after the run ended (%d in flight): a publisher ignores its context", rec.inFlight.Load())
	}
}

// sleepUntil waits until t; it reports false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// slowTable is the table for one broker: every figure per phase, the target
// beside it, one column per setting.
func slowTable(broker string, settings []setting, recs []*recorder, durs []time.Duration, interval time.Duration) *table {
	tb := &table{
		title: fmt.Sprintf("**%s**: %d callers, one call each per %v, %v deadlines; phases %s; %s; %s",
			broker, slowCallers, interval, slowDeadline, phaseList(durs), time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadNote()),
		head: []string{"figure", "target"},
	}
	for _, s := range settings {
		tb.head = append(tb.head, s.name)
	}
	row := func(figure, target string, cell func(r *recorder) string) {
		cells := []string{figure, target}
		for i, s := range settings {
			if recs[i] == nil {
				cells = append(cells, s.missing)
				continue
			}
			cells = append(cells, cell(recs[i]))
		}
		tb.add(cells...)
	}
	last := len(durs) - 1
	for i, lat := range slowLatencies {
		name := "goodput at " + lat.String()
		target := ""
		switch i {
		case 0:
			name += " (start)"
		case 1:
			target = "adaptive ≥ failsafe-go"
		case last:
			name += " (recovered)"
		}
		row(name, target, func(r *recorder) string {
			s := &r.stats[i]
			return pct(s.ok.Load(), s.calls.Load())
		})
	}
	for _, i := range []int{2, 3} {
		row("refusals within 10 ms at "+slowLatencies[i].String(), "≥ 95 %", func(r *recorder) string {
			s := &r.stats[i]
			return pct(s.fastRefused.Load(), s.refused.Load())
		})
	}
	for _, i := range []int{2, 3} {
		row("calls that waited out their deadline at "+slowLatencies[i].String(), "", func(r *recorder) string {
			s := &r.stats[i]
			return pct(s.waited.Load(), s.calls.Load())
		})
	}
	// In flight once the calls admitted before the phase's first deadline could end
	// are over (two deadlines into the phase: nothing could tell the protection of
	// the new latency sooner), then over the whole phase. At 300ms Little's law puts
	// about 150 calls in flight for a goodput near 100 %: the target is for 2s and
	// 30s.
	//
	// Two counts: callers inside Publish (sampled as each call starts, so that a
	// caller being refused at that moment counts, and a probe with one refusal in
	// progress shows as 2), and calls that were admitted (not refused), from their
	// start and end: what the broker carries. The target is for the second.
	for _, i := range []int{1, 2, 3} {
		row("max callers inside Publish at "+slowLatencies[i].String()+" from "+(2*slowDeadline).String()+" in (× healthy mean); whole phase", "", func(r *recorder) string {
			h := healthyInFlight(r)
			m, all := r.stats[i].maxSettled.Load(), r.stats[i].maxInFlight.Load()
			if h < 0.5 { // the healthy broker's calls were refused: no baseline
				return fmt.Sprintf("%d (healthy mean %.1f); %d", m, h, all)
			}
			return fmt.Sprintf("%d (%.1f× %.1f); %d", m, float64(m)/h, h, all)
		})
	}
	for _, i := range []int{1, 2, 3} {
		target := "≤ 2×"
		if i == 1 {
			target = ""
		}
		row("max admitted calls in flight at "+slowLatencies[i].String()+" from "+(2*slowDeadline).String()+" in (× healthy mean); whole phase", target, func(r *recorder) string {
			_, h := r.admittedInFlight(r.ends[0]/2, r.ends[0])
			from, to := r.ends[i]-durs[i], r.ends[i]
			m, _ := r.admittedInFlight(from+2*slowDeadline, to)
			all, _ := r.admittedInFlight(from, to)
			if h < 0.5 {
				return fmt.Sprintf("%d (healthy mean %.1f); %d", m, h, all)
			}
			return fmt.Sprintf("%d (%.1f× %.1f); %d", m, float64(m)/h, h, all)
		})
	}
	row("time to 90 % of the healthy rate after recovery", "≤ failsafe-go's", func(r *recorder) string {
		rate := healthyRate(r)
		if rate < 1 {
			return "no healthy rate to reach"
		}
		window := min(time.Second, durs[last]/4)
		d, ok := r.recovery(last, rate, 0.9, window)
		if !ok {
			return fmt.Sprintf("not within %v (healthy %.0f/s)", durs[last], rate)
		}
		return fmt.Sprintf("%.2f s (healthy %.0f/s)", d.Seconds(), rate)
	})
	row(fmt.Sprintf("refusals of the healthy broker in the first %v", min(earlyWindow, durs[0])), "0", func(r *recorder) string {
		if durs[0] < earlyWindow {
			return strconv.FormatInt(r.stats[0].refused.Load(), 10)
		}
		return strconv.FormatInt(r.early.Load(), 10)
	})
	row("max goroutines at 2s / 30s", "", func(r *recorder) string {
		return fmt.Sprintf("%d / %d", r.stats[2].maxGoroutines.Load(), r.stats[3].maxGoroutines.Load())
	})
	row("most frequent failures", "", func(r *recorder) string { return r.topErrors(2) })
	return tb
}

// healthyInFlight is the mean number of calls in flight over the second half of the
// first phase (the first half holds the start-up).
func healthyInFlight(r *recorder) float64 {
	return r.meanInFlight(r.ends[0]/2, r.ends[0])
}

// healthyRate is the success rate over the second half of the first phase (the first
// half holds the start-up).
func healthyRate(r *recorder) float64 {
	return r.okRate(r.ends[0]/2, r.ends[0])
}

func phaseList(durs []time.Duration) string {
	s := ""
	for i, d := range durs {
		if i > 0 {
			s += " → "
		}
		s += fmt.Sprintf("%v for %v", slowLatencies[i], d)
	}
	return s
}

// openKafka is a kafka-go writer (BatchTimeout 1ms, as the kafka docs advise for
// request paths; other settings default) on a fresh one-broker kfake, every dial
// through a fresh proxy.
func openKafka(t *testing.T, reg *registry.Registry) slowTarget {
	topic := slowName()
	return kafkaTarget(t, reg, harness.KFake(t, kfake.SeedTopics(1, topic)), topic)
}

// kafkaTarget is openKafka's publisher of topic on cluster.
func kafkaTarget(t *testing.T, reg *registry.Registry, cluster *kfake.Cluster, topic string) slowTarget {
	proxy := harness.NewProxy(t, cluster.ListenAddrs()[0])
	tr := &kafkago.Transport{Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, proxy.Addr()) // the advertised address too
	}}
	t.Cleanup(tr.CloseIdleConnections)
	w := &kafkago.Writer{Addr: kafkago.TCP(proxy.Addr()), Transport: tr, RequiredAcks: kafkago.RequireAll, BatchTimeout: time.Millisecond}
	pub, err := kafka.NewPublisher(w, reg, kafka.WithCloseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return slowTarget{pub: pub, d: transport.Destination{Broker: kafka.Broker, Name: topic}, proxy: proxy}
}

// openRabbit is a Manager and Publisher with their defaults on the machine's RabbitMQ
// through a fresh proxy, publishing to a fresh exchange that no queue is bound to:
// the broker confirms every message and stores none, so the shared server does not
// fill.
func openRabbit(t *testing.T, reg *registry.Registry) slowTarget {
	direct := harness.AMQPURL(t)
	exchange := slowName()
	withChannel(t, direct, func(ch *amqp091.Channel) error {
		return ch.ExchangeDeclare(exchange, "fanout", false, false, false, false, nil)
	})
	t.Cleanup(func() {
		withChannel(t, direct, func(ch *amqp091.Channel) error { return ch.ExchangeDelete(exchange, false, false) })
	})
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := harness.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	m, err := amqp.NewManager(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	pub, err := amqp.NewPublisher(m, reg) // guarded by reg, as every adapter's publisher is
	if err != nil {
		t.Fatal(err)
	}
	return slowTarget{pub: pub, d: amqp.Destination(exchange), proxy: proxy}
}

// withChannel runs f on a channel of a direct connection to url.
func withChannel(t *testing.T, url string, f func(*amqp091.Channel) error) {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := f(ch); err != nil {
		t.Fatal(err)
	}
}

// openSQS is the AWS SDK's client with its defaults on a fresh SQS test server
// through a fresh proxy.
func openSQS(t *testing.T, reg *registry.Registry) slowTarget {
	queue := slowName()
	client, proxy := harness.ProxiedSQS(t, queue)
	pub, err := sqs.NewPublisher(client, reg)
	if err != nil {
		t.Fatal(err)
	}
	return slowTarget{pub: pub, d: transport.Destination{Broker: sqs.Broker, Name: queue}, proxy: proxy}
}

// slowName returns a destination name no other run uses.
func slowName() string { return "brokerguard-goodput-" + strconv.FormatInt(time.Now().UnixNano(), 36) }
