package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/transport"
)

// sharedStore is one store of shared circuits: how a service makes its circuits there,
// and the flags that point the command at it.
type sharedStore struct {
	factory   func(transport.Destination, breaker.Policy) (breaker.Circuit, error)
	scope     breaker.Scope
	flags     []string
	idPrefix  string        // the service's WithIdentityPrefix
	staleness time.Duration // the replicas' MaxStateStaleness
}

const storeStaleness = time.Second

func dynamoStore(t *testing.T, clk *fakeclock.Clock, observe func(breaker.Transition)) sharedStore {
	endpoint := harness.Dynalite(t)
	client := harness.DynamoDBClient(endpoint)
	table := harness.DynamoDBTable(t, client, "cli-")
	return sharedStore{
		factory: dynamo.Factory(client, table, sharedstate.WithIdentityPrefix("billing/"), sharedstate.WithClock(clk),
			sharedstate.WithMaxStaleness(storeStaleness), sharedstate.WithObserver(observe)),
		scope:    breaker.SharedDependency,
		flags:    []string{"--dynamodb-table", table, "--dynamodb-endpoint", endpoint, "--identity-prefix", "billing/"},
		idPrefix: "billing/", staleness: storeStaleness,
	}
}

func redisStore(t *testing.T, clk *fakeclock.Clock, observe func(breaker.Transition)) sharedStore {
	addr := harness.RedisAddr(t)
	keys := harness.RedisKeyPrefix(t, addr)
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	return sharedStore{
		factory: redisstate.Factory(client, redisstate.WithKeyPrefix(keys), sharedstate.WithIdentityPrefix("billing/"),
			sharedstate.WithClock(clk), sharedstate.WithMaxStaleness(storeStaleness), sharedstate.WithObserver(observe)),
		scope:    breaker.SharedDependency,
		flags:    []string{"--redis-addr", addr, "--redis-prefix", keys, "--identity-prefix", "billing/"},
		idPrefix: "billing/", staleness: storeStaleness,
	}
}

func stateDirStore(t *testing.T, clk *fakeclock.Clock, observe func(breaker.Transition)) sharedStore {
	dir := filepath.Join(t.TempDir(), "state") // Open makes it private (0700)
	store, err := filestate.Open(dir, sharedstate.WithClock(clk), sharedstate.WithMaxStaleness(storeStaleness),
		sharedstate.WithObserver(observe))
	if err != nil {
		t.Fatal(err)
	}
	return sharedStore{factory: store.Factory(), scope: breaker.SingleHost, flags: []string{"--state-dir", dir},
		staleness: storeStaleness}
}

// TestCircuitsOnSharedState points the command at each store of shared circuits, where
// a service-like replica (the backend's Factory, a real policy, a fake clock started
// at the wall clock the command writes with) has opened kafka:orders. The command
// needs no policy: it lists and shows the open circuit with its NotBefore, holds it
// closed so that the replica admits within MaxStateStaleness, and clears the hold so
// that the replica's state machine opens it again.
func TestCircuitsOnSharedState(t *testing.T) {
	clearSourceEnv(t)
	for name, open := range map[string]func(*testing.T, *fakeclock.Clock, func(breaker.Transition)) sharedStore{
		"DynamoDB": dynamoStore, "Redis": redisStore, "StateDir": stateDirStore,
	} {
		t.Run(name, func(t *testing.T) {
			clk := fakeclock.New(time.Now())
			var mu sync.Mutex
			var seen []breaker.Transition
			observe := func(tr breaker.Transition) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, tr)
			}
			last := func() breaker.Transition {
				mu.Lock()
				defer mu.Unlock()
				return seen[len(seen)-1]
			}
			testSharedState(t, clk, open(t, clk, observe), last)
		})
	}
}

func testSharedState(t *testing.T, clk *fakeclock.Clock, st sharedStore, lastTransition func() breaker.Transition) {
	ctx := context.Background()
	policy := breaker.Policy{FailureThreshold: 3, BreakDuration: time.Hour, Scope: st.scope}
	replica, err := st.factory(transport.Destination{Broker: "kafka", Name: "orders"}, policy)
	if err != nil {
		t.Fatal(err)
	}
	fail := func() {
		t.Helper()
		for range policy.FailureThreshold {
			p, err := replica.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire while closed: %v", err)
			}
			p.Complete(breaker.Failure)
		}
	}
	circuits := func(args ...string) (string, string, int) {
		t.Helper()
		return cli(append(args, st.flags...)...)
	}
	fail()
	opened := replica.Snapshot()
	if opened.State != breaker.Open {
		t.Fatalf("after %d failures the replica is %+v", policy.FailureThreshold, opened)
	}

	out, errOut, code := circuits("list")
	notBefore := opened.NotBefore.UTC().Format(time.RFC3339)
	if code != 0 || !strings.Contains(out, "kafka:orders ") || !strings.Contains(out, " open ") || !strings.Contains(out, notBefore) {
		t.Fatalf("list: exit %d, want the open circuit until %s:\n%s%s", code, notBefore, out, errOut)
	}
	_, errOut, code = cli(append(append([]string{"list"}, st.flags...), "--identity-prefix", "no-such-service/")...)
	if code != exitNotFound || !strings.Contains(errOut, "no circuits found") || !strings.Contains(errOut, `"no-such-service/"`) {
		t.Fatalf("list under a prefix nobody uses: exit %d %q; want %d, saying nothing was found", code, errOut, exitNotFound)
	}
	out, errOut, code = circuits("show", "kafka:orders")
	if code != 0 || !strings.Contains(out, "(failure_threshold)") || !strings.Contains(out, "policy FailureThreshold=3") {
		t.Fatalf("show: exit %d, want the record's reason and policy:\n%s%s", code, out, errOut)
	}
	out, errOut, code = circuits("show", "kafka:orders", "--json")
	var row circuitRow
	if code != 0 || json.Unmarshal([]byte(out), &row) != nil {
		t.Fatalf("show --json: exit %d %s%s", code, out, errOut)
	}
	if row.State != "open" || row.NotBefore == nil || !row.NotBefore.Equal(opened.NotBefore) || row.Failures != 3 ||
		row.Generation != opened.Generation || row.Identity != st.idPrefix+"kafka:orders" || row.Record == nil ||
		row.Record.Reason != breaker.ReasonFailureThreshold || row.Scope != st.scope.String() {
		t.Fatalf("show --json of the open circuit (replica: %+v):\n%s", opened, out)
	}
	if st.idPrefix != "" {
		if _, errOut, code := cli("show", "kafka:orders", st.flags[0], st.flags[1], st.flags[2], st.flags[3]); code != exitNotFound {
			t.Fatalf("show without the service's identity prefix: exit %d %s; want %d", code, errOut, exitNotFound)
		}
	}

	out, errOut, code = circuits("force-close", "kafka:orders", "--for", "10m", "--reason", "broker is fine")
	if code != 0 || !strings.Contains(out, "forced-closed") || !strings.Contains(errOut, "force-close "+st.idPrefix+"kafka:orders") {
		t.Fatalf("force-close: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := replica.Acquire(ctx); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Acquire on the replica's fresh open snapshot = %v; want ErrOpen until it is stale", err)
	}
	clk.Advance(st.staleness)
	p, err := replica.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire MaxStateStaleness after the command's force-close: %v", err)
	}
	p.Complete(breaker.Failure) // counts for nothing under the hold
	fail()
	held := replica.Snapshot()
	if held.State != breaker.Closed || held.Override != breaker.ForcedClosed || held.Failures != 0 || held.Generation <= opened.Generation {
		t.Fatalf("the replica under the command's hold: %+v (opened in generation %d)", held, opened.Generation)
	}
	if tr := lastTransition(); tr.From != breaker.Open || tr.To != breaker.Closed || tr.Reason != breaker.ReasonForcedClosed ||
		tr.Generation != held.Generation {
		t.Fatalf("the replica's observer was last told %+v; want the command's force-close", tr)
	}

	out, errOut, code = circuits("clear", "kafka:orders")
	if code != 0 || !strings.Contains(out, " closed ") || !strings.Contains(out, " none ") {
		t.Fatalf("clear: exit %d\n%s%s", code, out, errOut)
	}
	clk.Advance(st.staleness)
	fail()
	if s := replica.Snapshot(); s.State != breaker.Open || s.Override != breaker.NoOverride || s.Generation <= held.Generation+1 {
		t.Fatalf("after clear, %d failures left the replica %+v; want it open again", policy.FailureThreshold, s)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"show", "kafka:nope"}, exitNotFound, `no circuit "` + st.idPrefix + `kafka:nope"`},
		{[]string{"force-open", "kafka:nope", "--for", "1m"}, exitNotFound, "no circuit"},
		{[]string{"force-open", "kafka:orders", "--until", "2001-01-01T00:00:00Z"}, exitRefused, "until: is in the past"},
		{[]string{"force-open", "kafka:orders", "--until", "tomorrow"}, exitRefused, "--until: not an RFC 3339 time"},
		{[]string{"force-open", "kafka:orders", "--for", "-5m"}, exitRefused, "--for: must be positive"},
		// Unix nanoseconds end in 2262: a later end would be stored as a time in 1970.
		{[]string{"force-open", "kafka:orders", "--until", "9999-12-31T00:00:00Z"}, exitRefused, "--until: is outside the years 1970 to 2261"},
		{[]string{"force-close", "kafka:orders", "--for", "87600h"}, exitRefused, "--for: is more than 24h0m0s ahead"},
	} {
		if _, errOut, code := circuits(tc.args...); code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
