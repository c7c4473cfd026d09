package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// The demo on a terminal: the screen at the end holds the transitions and other lines
// once each, a single table (the last), and the summary; nothing wrote past the redraw.
func TestDemoLiveTable(t *testing.T) {
	c, err := parseFlags([]string{"demo", "--short", "--svg", ""}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c.live = true
	term := &fakeTerminal{t: t}
	if err := demo(context.Background(), c, term); err != nil {
		t.Fatalf("demo: %v\n%s", err, strings.Join(term.screen(), "\n"))
	}
	screen := strings.Join(term.screen(), "\n")
	for _, want := range []struct {
		text string
		n    int
	}{
		{"state  published", 1}, // the live table's header: only the last table is left
		{"kafka:payments: closed -> open (failure_threshold)", 1},
		{"outage over", 1},
		{"producers stopped; draining the outbox", 1},
		{"enqueued  published", 1}, // the summary's header
		{"nothing lost:", 1},
	} {
		if n := strings.Count(screen, want.text); n != want.n {
			t.Errorf("%q is on the screen %d times, want %d:\n%s", want.text, n, want.n, screen)
		}
	}
	if strings.Index(screen, "state  published") > strings.Index(screen, "enqueued  published") {
		t.Errorf("the last table is not above the summary:\n%s", screen)
	}
	if strings.Count(term.raw.String(), "state  published") < 10 {
		t.Errorf("the table was drawn fewer than 10 times during a 4-second run")
	}
}

var (
	dashboardLine = regexp.MustCompile(`dashboard: (http://\S+)/admin/ token (\S+) `)
	ordersRow     = regexp.MustCompile(`^\s*kafka:orders\s+\S+\s+(\d+)\s`)
)

// demo --http serves the dashboard and its API for the demo's registry, on the
// listener it shares with --metrics; a hold made there shows in the API and in the
// output, and once it ends the outbox drains the rows it deferred.
func TestDemoDashboard(t *testing.T) {
	args := []string{"demo", "--short", "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--svg", ""}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(context.Background(), args, pw, io.Discard)
		pw.Close()
		done <- err
	}()
	lines := make(chan string, 1<<14) // the whole output; the reader never blocks the demo
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var out strings.Builder
	next := func(re *regexp.Regexp, ok func([]string) bool) []string {
		t.Helper()
		for l := range lines {
			out.WriteString(l + "\n")
			if m := re.FindStringSubmatch(l); m != nil && ok(m) {
				return m
			}
		}
		t.Fatalf("the output ended without a line matching %s:\n%s", re, out.String())
		return nil
	}
	any := func([]string) bool { return true }

	m := next(dashboardLine, any)
	base, token := m[1], m[2]
	if !strings.Contains(out.String(), "metrics on "+base+"/metrics\n") {
		t.Errorf("--metrics and --http with one address do not share the listener %s:\n%s", base, out.String())
	}
	// The circuit for kafka:orders exists once something was published to it.
	next(ordersRow, func(m []string) bool { n, _ := strconv.Atoi(m[1]); return n > 0 })

	if code, body := request(t, "GET", base+"/", "", ""); code != 200 || !strings.Contains(body, "<title>brokerguard</title>") {
		t.Errorf("GET / (redirected to the dashboard): %d", code)
	}
	if code, body := request(t, "GET", base+"/metrics", "", ""); code != 200 || !strings.Contains(body, "# TYPE") {
		t.Errorf("GET /metrics on the shared listener: %d", code)
	}
	if code, _ := request(t, "POST", base+"/admin/api/circuits/kafka:orders/force-open", "wrong-token-of-16-bytes", `{"for":"1m"}`); code != 401 {
		t.Errorf("a wrong token: %d, want 401", code)
	}
	code, body := request(t, "POST", base+"/admin/api/circuits/kafka:orders/force-open", token, `{"for":"1s","reason":"test"}`)
	var c admin.Circuit
	if err := json.Unmarshal([]byte(body), &c); code != 200 || err != nil || c.State != "open" || c.Override == "none" {
		t.Fatalf("force-open with the printed token: %d %s", code, body)
	}
	_, body = request(t, "GET", base+"/admin/api/transitions", "", "")
	if !strings.Contains(body, `"destination": "kafka:orders"`) || !strings.Contains(body, `"reason": "forced_open"`) {
		t.Errorf("the journal lacks the forced transition:\n%s", body)
	}
	if code, body := request(t, "GET", base+"/admin/api/outbox", "", ""); code != 200 || !strings.Contains(body, `"enabled": true`) {
		t.Errorf("GET /admin/api/outbox: %d %s", code, body)
	}

	for l := range lines {
		out.WriteString(l + "\n")
	}
	if err := <-done; err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"dashboard: force-open kafka:orders until ",
		"dashboard: force-open kafka:orders refused: ",
		"kafka:orders: closed -> open (forced_open)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "nothing lost:") {
		t.Errorf("the rows deferred by a hold that ended were not drained:\n%s", out.String())
	}
}

// Rows that a hold set on the dashboard defers past the drain are reported as held, not
// lost; the same rows without a hold are lost.
func TestSummaryReportsHeldRows(t *testing.T) {
	ctx := context.Background()
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	st := memoryStore{memory.New(nil)}
	ids, err := st.enqueue(ctx, []outbox.Entry{{Destination: orders, Message: transport.Message{Value: []byte("a")}},
		{Destination: orders, Message: transport.Message{Value: []byte("b")}}})
	if err != nil {
		t.Fatal(err)
	}
	enqueued := map[transport.Destination][]int64{orders: ids}
	hooks := &counts{by: map[transport.Destination]*[4]int64{}}
	until := time.Now().Add(time.Minute)

	var held holds
	held.record(admin.AuditEvent{Action: "force-open", Destination: "kafka:payments", Until: until}) // another destination
	held.record(admin.AuditEvent{Action: "force-open", Destination: "kafka:orders", Until: until, Err: "refused"})
	held.record(admin.AuditEvent{Action: "force-open", Destination: "kafka:orders", Until: time.Now().Add(-time.Second)}) // over
	var out strings.Builder
	if lost, err := summary(ctx, &out, st, []transport.Destination{orders}, enqueued, hooks, nil, &held); err != nil || lost != 2 {
		t.Fatalf("no hold on kafka:orders that still lasts: lost %d (%v), want 2:\n%s", lost, err, out.String())
	}

	held.record(admin.AuditEvent{Action: "force-open", Destination: "kafka:orders", Until: until})
	out.Reset()
	lost, err := summary(ctx, &out, st, []transport.Destination{orders}, enqueued, hooks, nil, &held)
	want := "kafka:orders: 2 rows still pending, held open from the dashboard until " + until.Format(time.TimeOnly) + "\n"
	if err != nil || lost != 0 || !strings.Contains(out.String(), want) || !strings.HasSuffix(out.String(), "2 enqueued, 0 published, 0 lost\n") {
		t.Fatalf("held: lost %d (%v), want 0 and %q:\n%s", lost, err, want, out.String())
	}
}

// request sends a request with an optional bearer token and JSON body and returns the
// status and body.
func request(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestDemoHTTPAddressErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--http", "no-port"},
		{"--http", "127.0.0.1:0", "--metrics", "no-port"},
	} {
		err := run(context.Background(), append([]string{"demo", "--short", "--svg", ""}, args...), io.Discard, io.Discard)
		if flag := args[len(args)-2]; err == nil || !strings.HasPrefix(err.Error(), flag+": ") {
			t.Errorf("%v: %v, want an error naming %s", args, err, flag)
		}
	}
}
