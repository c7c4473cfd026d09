package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// onCallStore is what the CLI tests fill and check.
type onCallStore interface {
	outbox.Store
	outbox.DeadLetters
}

var (
	cliOrders = transport.Destination{Broker: "kafka", Name: "orders"}
	cliEmails = transport.Destination{Broker: "kafka", Name: "emails"}
)

// fillOutbox enqueues four rows through enqueue and leaves ids 1-3 dead (two
// attempts_exhausted of orders, one circuit_deferral_exhausted of emails), 4 pending
// on emails, and emails held for ten minutes because it is unusable.
func fillOutbox(t *testing.T, s onCallStore, enqueue func(...outbox.Entry) ([]int64, error)) {
	t.Helper()
	ctx := context.Background()
	var entries []outbox.Entry
	for _, d := range []transport.Destination{cliOrders, cliOrders, cliEmails, cliEmails} {
		entries = append(entries, outbox.Entry{Destination: d, Message: transport.Message{Value: []byte("v")}})
	}
	ids, err := enqueue(entries...)
	if err != nil || fmt.Sprint(ids) != "[1 2 3 4]" {
		t.Fatalf("Enqueue = %v, %v", ids, err)
	}
	now := time.Now()
	if recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: "t", Now: now, Limit: 3, Lease: time.Minute}); err != nil || len(recs) != 3 {
		t.Fatalf("Claim = %d, %v", len(recs), err)
	}
	if _, n, err := s.Fail(ctx, "t", []outbox.Failure{
		{ID: 1, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": too large"},
		{ID: 2, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": bad key"},
		{ID: 3, Dead: true, Err: outbox.ReasonDeferralExhausted},
	}); n != 3 || err != nil {
		t.Fatalf("Fail = %d, %v", n, err)
	}
	if _, err := s.Hold(ctx, outbox.Hold{Destination: cliEmails, Now: now, Until: now.Add(10 * time.Minute), MaxDeferral: time.Hour,
		Reason: "403 ACCESS_REFUSED"}); err != nil {
		t.Fatal(err)
	}
}

// outboxCLI runs "brokerguard outbox args..." like cli.
func outboxCLI(args ...string) (string, string, int) { return runCLI("outbox", args...) }

// checkOutboxCommands runs the commands against a store filled by fillOutbox, found
// through where (--database-url or --url flags), and checks what they print and do.
func checkOutboxCommands(t *testing.T, s onCallStore, where ...string) {
	t.Helper()
	with := func(args ...string) []string { return append(args, where...) }
	out, errOut, code := outboxCLI(with("stats")...)
	if code != 0 {
		t.Fatalf("stats: exit %d %s", code, errOut)
	}
	for _, want := range []string{`pending 1,`, `kafka:emails +1 +\S+ +\d{4}-\d\d-\d\dT\S+Z +(9m5\ds|10m0s) +"403 ACCESS_REFUSED"\n`,
		`attempts_exhausted +2\n`, `circuit_deferral_exhausted +1\n`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("stats prints no %s:\n%s", want, out)
		}
	}
	out, _, code = outboxCLI(with("stats", "--json")...)
	var st admin.OutboxStats
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Held) != 1 || st.Held[0].Destination != "kafka:emails" ||
		st.Held[0].RemainingMS < 9*60_000 || len(st.Dead) != 2 || st.Dead[0].Rows != 2 {
		t.Errorf("stats --json: exit %d %+v\n%s", code, st, out)
	}

	out, _, code = outboxCLI(with("dead", "--limit", "2")...)
	if code != 0 || !strings.Contains(out, `1   kafka:orders  attempts_exhausted`) || !strings.Contains(out, "more: --after 2") ||
		strings.Contains(out, "kafka:emails") {
		t.Errorf("dead --limit 2: exit %d\n%s", code, out)
	}
	out, _, code = outboxCLI(with("dead", "--after", "2", "--json")...)
	var page admin.DeadPage
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Rows) != 1 || page.Rows[0].ID != 3 || page.NextAfter != 0 {
		t.Errorf("dead --after 2 --json: exit %d %+v", code, page)
	}

	out, errOut, code = outboxCLI(with("requeue", "--destination", "kafka:orders", "--reason", "attempts_exhausted")...)
	if code != 0 || out != "requeued 2 dead rows\n" {
		t.Errorf("requeue by destination and reason: exit %d %q %s", code, out, errOut)
	}
	out, errOut, code = outboxCLI(with("requeue", "3", "--json")...)
	if code != 0 || strings.TrimSpace(out) != `{
  "requeued": 1
}` {
		t.Errorf("requeue 3: exit %d %q %s", code, out, errOut)
	}
	if recs, err := s.DeadRows(context.Background(), outbox.DeadFilter{}, outbox.Page{}); len(recs) != 0 || err != nil {
		t.Errorf("after the requeues %d rows are dead (%v)", len(recs), err)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"requeue"}, 2, "requeueing every dead row at once is refused"},
		{[]string{"requeue", "x1"}, 2, `"x1" is not a row id`},
		{[]string{"requeue", "0"}, 2, `"0" is not a row id`},
		{[]string{"dead", "--limit", "501"}, 2, "--limit must be from 1 to 500"},
		{[]string{"dead", "--limit", "0"}, 2, "--limit must be from 1 to 500"},
		{[]string{"dead", "--destination", "orders"}, 2, "--destination"},
		{[]string{"stats", "extra"}, 2, "takes no arguments"},
		{[]string{"explode"}, 2, "unknown command"},
	} {
		_, errOut, code := outboxCLI(with(tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

func TestOutboxCommandsOnPostgres(t *testing.T) {
	clearOutboxEnv(t)
	dsn := harness.PostgresSchema(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// A table of its own name, as a service's WithTable gives: every command must
	// read it, not the default table (which does not exist here).
	table, err := postgres.NewTableName("", "orders_outbox")
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, pool, postgres.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	s := postgres.New(pool, postgres.WithTable(table))
	fillOutbox(t, s, func(entries ...outbox.Entry) (ids []int64, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			ids, err = s.Enqueue(ctx, postgres.Pgx(tx), entries...)
			return err
		})
		return ids, err
	})
	checkOutboxCommands(t, s, "--database-url", dsn, "--table", "orders_outbox")

	// DATABASE_URL names the database when no flag does.
	t.Setenv("DATABASE_URL", dsn)
	if out, errOut, code := outboxCLI("stats", "--table", "orders_outbox"); code != 0 || !strings.Contains(out, "pending 4,") {
		t.Errorf("stats from DATABASE_URL: exit %d %s %s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stats"}, 1, "does not exist"}, // the default table is not there
		{[]string{"stats", "--table", "Bad-Name"}, 2, "--schema/--table"},
		{[]string{"stats", "--url", "http://127.0.0.1:1", "--database-url", dsn}, 2, "not both"},
		{[]string{"stats", "--database-url", "postgres://127.0.0.1:1/x?connect_timeout=5"}, 1, "127.0.0.1"},
	} {
		_, errOut, code := outboxCLI(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

func TestOutboxCommandsThroughTheAdminHandler(t *testing.T) {
	clearOutboxEnv(t)
	mem := memory.New(nil)
	fillOutbox(t, mem, func(entries ...outbox.Entry) ([]int64, error) { return mem.Enqueue(context.Background(), entries...) })
	reg, err := registry.New(registry.Policy{Circuit: breaker.DisabledPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	var audits []admin.AuditEvent
	h, err := admin.New(reg, admin.WithOutbox(mem), admin.WithMutations(testToken),
		admin.WithAudit(func(_ context.Context, e admin.AuditEvent) { audits = append(audits, e) }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	checkOutboxCommands(t, mem, "--url", srv.URL, "--token", testToken)
	if len(audits) != 2 || audits[0].Action != "requeue" || audits[0].Requeued != 2 {
		t.Errorf("audits = %+v", audits)
	}

	bare, err := admin.New(reg, admin.WithMutations(testToken))
	if err != nil {
		t.Fatal(err)
	}
	bareSrv := httptest.NewServer(bare)
	t.Cleanup(bareSrv.Close)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"requeue", "1", "--url", srv.URL}, 2, "--token"},
		{[]string{"requeue", "1", "--url", srv.URL, "--token", "wrong-token-0123456789"}, exitRefused, "wrong bearer token"},
		{[]string{"stats", "--url", bareSrv.URL}, exitRefused, "serves no outbox"},
		{[]string{"dead", "--url", bareSrv.URL}, 1, "501"},
		{[]string{"stats", "--url", srv.URL, "--table", "t"}, 2, "go with --database-url"},
		{[]string{"stats", "--url", srv.URL + "/nowhere"}, 1, "404"},
		{[]string{"stats"}, 2, "give --database-url, --mysql-dsn or --url"},
	} {
		_, errOut, code := outboxCLI(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// clearOutboxEnv unsets the variables that name where the outbox is.
func clearOutboxEnv(t *testing.T) {
	for _, v := range []string{"DATABASE_URL", "MYSQL_DSN", "BROKERGUARD_ADMIN_URL", "BROKERGUARD_ADMIN_TOKEN"} {
		t.Setenv(v, "")
	}
}
