package telemetry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// The shipped alert rules and their promtool unit tests.
const (
	rulesFile     = "../deploy/prometheus/brokerguard.rules.yml"
	rulesTestFile = "../deploy/prometheus/brokerguard.rules.test.yml"
	dashboardFile = "../deploy/grafana/brokerguard.json"
)

// TestAlertRulesPromtool checks the shipped rules with promtool and runs their unit
// tests (exact pending and firing times, annotations included).
func TestAlertRulesPromtool(t *testing.T) {
	promtool := harness.Promtool(t)
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// speedup is how much faster than real time the test service's clock runs in
// TestAlertsInPrometheus; the rules' durations are divided by it.
const speedup = 30

// fastRules rewrites the rules for a clock speedup times faster than real time: every
// `for:` and every range selector in minutes becomes that many minutes / speedup.
func fastRules(t *testing.T, rules string) string {
	t.Helper()
	scale := func(re *regexp.Regexp, s string) string {
		return re.ReplaceAllStringFunc(s, func(m string) string {
			sub := re.FindStringSubmatch(m)
			n, err := strconv.Atoi(sub[2])
			if err != nil {
				t.Fatal(err)
			}
			return sub[1] + strconv.Itoa(n*60/speedup) + "s" + sub[3]
		})
	}
	rules = scale(regexp.MustCompile(`(for: )(\d+)m()`), rules)
	rules = scale(regexp.MustCompile(`(\[)(\d+)m(\])`), rules)
	if strings.Contains(rules, "m]") || regexp.MustCompile(`for: \d+m`).MatchString(rules) {
		t.Fatalf("rules left unscaled:\n%s", rules)
	}
	return rules
}

// outageBacklog is the outbox backlog of the test service: the rows enqueued for a
// destination while it is down wait from the start of its outage.
type outageBacklog struct {
	mu    sync.Mutex
	since map[transport.Destination]time.Time // destination -> when its oldest pending row was enqueued
	clock interface{ Now() time.Time }
}

func (b *outageBacklog) read(context.Context) ([]outbox.DestinationBacklog, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []outbox.DestinationBacklog
	for d, since := range b.since {
		out = append(out, outbox.DestinationBacklog{Destination: d, Pending: 10, Oldest: b.clock.Now().Sub(since)})
	}
	return out, nil
}

func (b *outageBacklog) set(d transport.Destination, pending bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if pending {
		b.since[d] = b.clock.Now()
	} else {
		delete(b.since, d)
	}
}

// alert is one alert as Prometheus's /api/v1/alerts reports it.
type alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

func (a alert) key() string {
	return a.Labels["alertname"] + "/" + a.Labels["messaging_destination_name"]
}

// promAPI queries a Prometheus server's HTTP API.
type promAPI struct {
	t    *testing.T
	base string
}

func (p promAPI) get(path string, into any) error {
	resp, err := http.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s", path, env.Error)
	}
	return json.Unmarshal(env.Data, into)
}

func (p promAPI) alerts() map[string]alert {
	p.t.Helper()
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", &data); err != nil {
		p.t.Fatal(err)
	}
	out := map[string]alert{}
	for _, a := range data.Alerts {
		out[a.key()] = a
	}
	return out
}

// query runs an instant query and returns how many series it gave.
func (p promAPI) query(expr string) (int, error) {
	var data struct {
		Result []json.RawMessage `json:"result"`
	}
	err := p.get("/api/v1/query?query="+url.QueryEscape(expr), &data)
	return len(data.Result), err
}

// alertLog follows the alerts by polling, remembering for each when it was first seen
// pending and firing, its activeAt values, and when it was last seen at all.
type alertLog struct {
	pending, firing, lastSeen map[string]time.Time
	activeAt                  map[string][]time.Time // distinct values, in order
}

func (l *alertLog) observe(now time.Time, alerts map[string]alert) {
	for k, a := range alerts {
		switch a.State {
		case "pending":
			if _, ok := l.pending[k]; !ok {
				l.pending[k] = now
			}
		case "firing":
			if _, ok := l.firing[k]; !ok {
				l.firing[k] = now
			}
		}
		if at := l.activeAt[k]; len(at) == 0 || !at[len(at)-1].Equal(a.ActiveAt) {
			l.activeAt[k] = append(at, a.ActiveAt)
		}
		l.lastSeen[k] = now
	}
}

// TestAlertsInPrometheus runs a real Prometheus that scrapes a test service's /metrics
// every second and evaluates the shipped rules (durations divided by speedup; the
// service's clock runs speedup times faster, so the thresholds in seconds hold as
// they are) through an outage of kafka:payments, an enforcing destination, and of
// amqp:audit, a FailOpen one, while kafka:orders stays healthy. It checks through the
// HTTP API that each alert goes pending, then fires after its `for:` without
// restarting while probes flip the circuit between open and half-open, that nothing
// is raised for the healthy destination or by a FailOpen circuit's unhealthiness, and
// that every alert resolves after recovery. The dashboard's queries run against the
// same server.
func TestAlertsInPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a Prometheus server for about 45 seconds; not in -short")
	}
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	payments := transport.Destination{Broker: "kafka", Name: "payments"}
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	audit := transport.Destination{Broker: "amqp", Name: "audit"}
	// The probe lease outlasts the slow broker's answer below, so that every probe's
	// failure counts and reopens the circuit.
	policy := breaker.Policy{FailureThreshold: 3, BreakDuration: 30 * time.Second, ProbeLease: 2 * time.Minute}
	failOpen := policy
	failOpen.Mode = breaker.FailOpen
	backlog := &outageBacklog{since: map[transport.Destination]time.Time{}}
	s := newPromService(t, promConfig{
		policy:  policy,
		regOpts: []registry.Option{registry.WithOverride("amqp:audit", registry.Policy{Circuit: failOpen})},
		opts: []telemetry.Option{telemetry.WithOutboxBacklog(func(ctx context.Context) ([]outbox.DestinationBacklog, error) {
			return backlog.read(ctx)
		}, time.Second)},
	})
	backlog.clock = s.clock

	// The service runs: its clock goes speedup times faster than real time, and it
	// publishes to each destination 20 times a (real) second.
	stop := make(chan struct{})
	var drivers sync.WaitGroup
	t.Cleanup(func() { close(stop); drivers.Wait() })
	var paymentCalls sync.Map // real time -> struct{}: calls that reached the payments broker
	every50ms := func(f func()) {
		drivers.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					f()
				}
			}
		})
	}
	every50ms(func() { s.clock.Advance(50 * time.Millisecond * speedup) })
	for _, d := range []transport.Destination{orders, payments, audit} {
		every50ms(func() { // a destination's own publisher: a slow broker holds up only its own calls
			err := s.publish(d)
			switch {
			case err == nil:
				s.m.RecordDispatch(d, 1, 0, 0, 0)
			case isRejection(err):
				s.m.RecordDispatch(d, 0, 1, 0, 0)
			default:
				s.m.RecordDispatch(d, 0, 0, 1, 0)
			}
			if d == payments && !isRejection(err) {
				paymentCalls.Store(time.Now(), struct{}{})
			}
		})
	}

	api := promAPI{t: t, base: harness.Prometheus(t, scrapeConfig(s), map[string]string{"rules.yml": fastRules(t, string(rules))})}
	waitFor(t, "Prometheus to scrape the service", 20*time.Second, func() bool {
		n, err := api.query(`brokerguard_circuit_calls_total{job="brokerguard-test"}`)
		return err == nil && n > 0
	})

	log := &alertLog{pending: map[string]time.Time{}, firing: map[string]time.Time{}, lastSeen: map[string]time.Time{}, activeAt: map[string][]time.Time{}}
	poll := func(what string, within time.Duration, done func(map[string]alert) bool) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			now := time.Now()
			a := api.alerts()
			log.observe(now, a)
			if done(a) {
				return
			}
			if now.After(deadline) {
				t.Fatalf("waiting %v for %s; alerts: %+v", within, what, a)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Healthy: three seconds without any alert.
	healthyUntil := time.Now().Add(3 * time.Second)
	poll("three healthy seconds", 10*time.Second, func(a map[string]alert) bool {
		if len(a) > 0 {
			t.Fatalf("alerts while every destination is healthy: %+v", a)
		}
		return time.Now().After(healthyUntil)
	})

	// The outage.
	outage := time.Now()
	// payments answers with an error after 1.2 s (36 s on the service's clock, a write
	// timeout): each probe holds the circuit half-open across a scrape or two.
	s.raw.setSlow(payments, errDown, 1200*time.Millisecond)
	s.raw.set(audit, errDown)
	backlog.set(payments, true)
	const (
		unhealthy = "BrokerguardCircuitUnhealthy/payments"
		rejected  = "BrokerguardCallsRejected/payments"
		oldest    = "BrokerguardOutboxOldestPending/payments"
		bypass    = "BrokerguardFailOpenBypass/audit"
	)
	all := []string{unhealthy, rejected, oldest, bypass}
	poll("every alert to fire", 40*time.Second, func(a map[string]alert) bool {
		for k := range a {
			if !strings.HasSuffix(k, "/payments") && k != bypass {
				t.Fatalf("unexpected alert %s during the outage: %+v", k, a[k])
			}
		}
		for _, k := range all {
			if a[k].State != "firing" {
				return false
			}
		}
		return true
	})
	for _, k := range all {
		if _, ok := log.pending[k]; !ok {
			t.Errorf("%s fired without being seen pending", k)
		}
		if at := log.activeAt[k]; len(at) != 1 {
			t.Errorf("%s went pending more than once (activeAt %v): its condition was interrupted", k, at)
		} else if at[0].Before(outage.Add(-time.Second)) {
			t.Errorf("%s active at %v, before the outage began (%v)", k, at[0], outage)
		}
	}
	// Each alert fires once its `for:` has passed since it went pending, not before
	// and not much later (scrape and evaluation intervals of 1s, polling every 0.2s).
	for k, forReal := range map[string]time.Duration{unhealthy: 10 * time.Second, rejected: 4 * time.Second, oldest: 2 * time.Second, bypass: 2 * time.Second} {
		if at := log.activeAt[k]; len(at) == 1 {
			if d := log.firing[k].Sub(at[0]); d < forReal || d > forReal+4*time.Second {
				t.Errorf("%s fired %v after going pending, want its for: of %v", k, d, forReal)
			}
		}
	}
	// The oldest row passes 2 (service) minutes 4 real seconds into the outage.
	if at := log.activeAt[oldest]; len(at) == 1 && at[0].Sub(outage) < 3*time.Second {
		t.Errorf("%s went pending %v into the outage, before the oldest row was 2 minutes old", oldest, at[0].Sub(outage))
	}
	// Probes reached the broker while the unhealthy alert was pending: the circuit
	// went half-open and open again, and the alert did not restart.
	probes := 0
	paymentCalls.Range(func(k, _ any) bool {
		if at := k.(time.Time); at.After(log.pending[unhealthy]) && at.Before(log.firing[unhealthy]) {
			probes++
		}
		return true
	})
	if probes < 2 {
		t.Errorf("%d probes while %s was pending; the test wants the circuit to flip several times", probes, unhealthy)
	}

	checkDashboardQueries(t, api)

	// Recovery: every alert resolves.
	recovery := time.Now()
	s.raw.set(payments, nil)
	s.raw.set(audit, nil)
	backlog.set(payments, false)
	poll("every alert to resolve", 40*time.Second, func(a map[string]alert) bool { return len(a) == 0 })
	for k, within := range map[string]time.Duration{unhealthy: 8 * time.Second, oldest: 8 * time.Second, bypass: 16 * time.Second, rejected: 26 * time.Second} {
		if d := log.lastSeen[k].Sub(recovery); d > within {
			t.Errorf("%s still active %v after recovery, want resolved within %v", k, d, within)
		}
	}
	t.Logf("outage %v: first pending after %v; recovery: resolved after %v",
		recovery.Sub(outage).Round(time.Second), log.pending[unhealthy].Sub(outage).Round(100*time.Millisecond),
		log.lastSeen[rejected].Sub(recovery).Round(100*time.Millisecond))
}

func isRejection(err error) bool {
	_, ok := err.(*registry.RejectedError)
	return ok
}

// waitFor polls cond every 200ms until it holds or within passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting %v for %s", within, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkDashboardQueries runs every query of the shipped Grafana dashboard, with its
// variables filled in, and expects each to succeed and return data.
func checkDashboardQueries(t *testing.T, api promAPI) {
	t.Helper()
	for _, q := range dashboardQueries(t) {
		expr := strings.NewReplacer("$__rate_interval", "20s", "$job", ".*", "$destination", ".*").Replace(q.expr)
		n, err := api.query(expr)
		if err != nil {
			t.Errorf("dashboard panel %q: %v", q.panel, err)
		} else if n == 0 {
			t.Errorf("dashboard panel %q: %s gave no data during the outage", q.panel, expr)
		}
	}
}

type dashboardQuery struct{ panel, expr string }

// dashboardQueries reads the PromQL of every panel of the shipped dashboard.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", filepath.Base(dashboardFile), err)
	}
	var out []dashboardQuery
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, dashboardQuery{panel: p.Title, expr: tg.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}
