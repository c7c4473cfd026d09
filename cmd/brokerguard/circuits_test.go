package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

const testToken = "cli-test-token-0123456789"

func adminServer(t *testing.T) (*registry.Registry, string) {
	t.Helper()
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := reg.Circuit(transport.Destination{Broker: "kafka", Name: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Complete(breaker.Failure)
	h, err := admin.New(reg, admin.WithMutations(testToken))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return reg, srv.URL
}

func exitCode(err error) int {
	var e *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &e):
		return e.code
	}
	return 1
}

// cli runs "brokerguard circuits args..." and returns its output, its error output
// (with the error main would print) and the exit code main would exit with.
func cli(args ...string) (string, string, int) { return runCLI("circuits", args...) }

// runCLI runs "brokerguard cmd args..." like cli.
func runCLI(cmd string, args ...string) (string, string, int) {
	var out, errOut strings.Builder
	err := run(context.Background(), append([]string{cmd}, args...), &out, &errOut)
	if err != nil {
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), exitCode(err)
}

// clearSourceEnv unsets the variables that name where circuits are, so that a test
// run with REDIS_ADDR (or another) in its environment gives the command one source.
func clearSourceEnv(t *testing.T) {
	for _, v := range []string{"BROKERGUARD_ADMIN_URL", "BROKERGUARD_ADMIN_TOKEN", "BROKERGUARD_DYNAMODB_TABLE",
		"DYNAMODB_ENDPOINT", "REDIS_ADDR", "BROKERGUARD_REDIS_PREFIX", "BROKERGUARD_STATE_DIR", "BROKERGUARD_IDENTITY_PREFIX"} {
		t.Setenv(v, "")
	}
}

func TestCircuitsCommand(t *testing.T) {
	clearSourceEnv(t)
	reg, url := adminServer(t)
	payments := transport.Destination{Broker: "kafka", Name: "payments"}

	out, _, code := cli("list", "--url", url)
	if code != 0 || !strings.Contains(out, "kafka:payments") || !strings.Contains(out, "open") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	out, _, code = cli("show", "kafka:payments", "--url", url, "--json")
	var one admin.Circuit
	if code != 0 || json.Unmarshal([]byte(out), &one) != nil || one.State != "open" {
		t.Fatalf("show --json: %d %q", code, out)
	}
	t.Setenv("BROKERGUARD_ADMIN_URL", url)
	t.Setenv("BROKERGUARD_ADMIN_TOKEN", testToken)
	if out, errOut, code := cli("force-close", "kafka:payments", "--for", "10m", "--reason", "test"); code != 0 ||
		!strings.Contains(out, "forced-closed") {
		t.Fatalf("force-close: %d %s %s", code, out, errOut)
	}
	if s := reg.Snapshots()[payments]; s.Override != breaker.ForcedClosed {
		t.Fatalf("after force-close the circuit is %+v", s)
	}
	if _, errOut, code := cli("clear", "kafka:payments"); code != 0 {
		t.Fatalf("clear: %d %s", code, errOut)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"show", "kafka:nope"}, exitNotFound, "no live circuit"},
		{[]string{"force-open", "kafka:payments", "--until", "2001-01-01T00:00:00Z"}, exitRefused, "until: is in the past"},
		{[]string{"force-open", "kafka:payments", "--token", "wrong-token-0123456789"}, 2, "give --for or --until"},
		{[]string{"force-open", "kafka:payments", "--for", "1m", "--token", "wrong-token-0123456789"}, exitRefused, "wrong bearer token"},
		{[]string{"explode"}, 2, "unknown command"},
		{[]string{"show"}, 2, "want 1 argument"},
		{[]string{"list", "--url", "http://127.0.0.1:1"}, 1, "connect"},
		{[]string{"list", "--redis-addr", "127.0.0.1:1"}, 1, "Redis 127.0.0.1:1"},
		{[]string{"show", "kafka:payments", "--state-dir", filepath.Join(t.TempDir(), "missing")}, exitRefused, "not a directory"},
		{[]string{"list", "--url", "http://127.0.0.1:1", "--state-dir", t.TempDir()}, 2, "one place to find circuits, not --url and --state-dir"},
	} {
		_, errOut, code := cli(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// A 404 that is not the admin handler's "no live circuit" (a --url that misses the
// handler's mount point) is not "no such destination": a script that treats exit 3 as
// "nothing to do" must not mistake a misconfigured URL for it.
func TestCircuitsWrongURLIsNotNotFound(t *testing.T) {
	_, base := adminServer(t)
	for _, args := range [][]string{
		{"list", "--url", base + "/nowhere"},
		{"show", "kafka:payments", "--url", base + "/nowhere"},
		{"clear", "kafka:payments", "--url", base + "/nowhere", "--token", testToken},
	} {
		var out, errOut strings.Builder
		err := run(context.Background(), append([]string{"circuits"}, args...), &out, &errOut)
		if code := exitCode(err); code != 1 || !strings.Contains(err.Error(), "404") {
			t.Errorf("%v: exit %d (%v), want 1 naming the 404", args, code, err)
		}
	}
}

// TestCircuitsListPages: list reads a service's circuits a page at a time, so no
// answer is larger than a page however many circuits the service has, and prints
// them all, in order.
func TestCircuitsListPages(t *testing.T) {
	clearSourceEnv(t)
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2*listPage + 345
	for i := range n {
		if _, err := reg.Circuit(transport.Destination{Broker: "kafka", Name: fmt.Sprintf("t%05d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := admin.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var pages []int // circuits per answer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		var page admin.Circuits
		_ = json.Unmarshal(rec.Body.Bytes(), &page)
		pages = append(pages, len(page.Circuits))
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	out, errOut, code := cli("list", "--json", "--url", srv.URL)
	var list admin.Circuits
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("list --json: exit %d %s", code, errOut)
	}
	if len(list.Circuits) != n || list.Circuits[0].Destination != "kafka:t00000" || list.Circuits[n-1].Destination != fmt.Sprintf("kafka:t%05d", n-1) {
		t.Errorf("listed %d circuits, from %q", len(list.Circuits), list.Circuits[0].Destination)
	}
	if !slices.Equal(pages, []int{listPage, listPage, 345}) {
		t.Errorf("answers held %v circuits, want pages of %d", pages, listPage)
	}
}

// TestCircuitsShowIsolatedPartitions: a topic whose circuit is closed but whose
// partition is isolated says so in list's state column and, in show, names the
// partition, since when, its next probe and its last error: the CLI shows the
// mechanism that refuses the topic's keyed calls, and why.
func TestCircuitsShowIsolatedPartitions(t *testing.T) {
	clearSourceEnv(t)
	reg, url := adminServer(t)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	ps, err := reg.Partitions(orders)
	if err != nil || ps == nil {
		t.Fatalf("partitions: %v %v", ps, err)
	}
	ps.SetCount(3)
	ps.Complete(0, breaker.Success)                                                // partition 0 answers: the topic is not down
	ps.CompleteWith(2, breaker.Failure, errors.New("kafka: leader not available")) // FailureThreshold 1: isolated
	if len(reg.IsolatedPartitions(orders)) != 1 {
		t.Fatalf("partition 2 not isolated: %+v", reg.IsolatedPartitions(orders))
	}
	out, errOut, code := cli("list", "--wide", "--url", url)
	if code != 0 || !strings.Contains(out, "closed, 1 partition isolated") || !strings.Contains(out, "partition 2: kafka: leader not available") {
		t.Errorf("list: exit %d %s\n%s", code, errOut, out)
	}
	out, errOut, code = cli("show", "kafka:orders", "--url", url)
	if code != 0 || !strings.Contains(out, "partition 2 isolated since ") ||
		!strings.Contains(out, "after 1 failures; next probe at ") || !strings.Contains(out, "; last error: kafka: leader not available") {
		t.Errorf("show: exit %d %s\n%s", code, errOut, out)
	}
	// The name a partition's refusal gives shows its topic.
	out, errOut, code = cli("show", "kafka:orders/2", "--url", url)
	if code != 0 || !strings.Contains(out, "kafka:orders ") || !strings.Contains(out, "partition 2 isolated since ") {
		t.Errorf("show kafka:orders/2: exit %d %s\n%s", code, errOut, out)
	}
}

// TestCircuitsShowTheConnectionCircuit: the AMQP connection circuit that refuses
// publishes while RabbitMQ is down is listed and answered by its name, as a refused
// publish's error gives it.
func TestCircuitsShowTheConnectionCircuit(t *testing.T) {
	clearSourceEnv(t)
	reg, url := adminServer(t)
	m, err := amqp.NewManager("amqp://guest:guest@127.0.0.1:1/") // nothing listens: dials are refused
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if _, err := amqp.NewPublisher(m, reg); err != nil {
		t.Fatal(err)
	}
	name := m.ConnectionDestination().String()
	if name != "amqp-connection:127.0.0.1:1" {
		t.Fatalf("connection circuit named %q", name)
	}
	out, errOut, code := cli("list", "--url", url)
	if code != 0 || !strings.Contains(out, name+" ") {
		t.Errorf("list: exit %d %s\n%s", code, errOut, out)
	}
	out, errOut, code = cli("show", name, "--url", url)
	if code != 0 || !strings.HasPrefix(strings.SplitN(out, "\n", 3)[1], name+" ") {
		t.Errorf("show %s: exit %d %s\n%s", name, code, errOut, out)
	}
}
