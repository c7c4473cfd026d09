package main

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/mysql"
)

// The outbox commands read and requeue a MySQL/MariaDB outbox as they do a
// PostgreSQL one: through --mysql-dsn, or MYSQL_DSN when no other place is named.
func TestOutboxCommandsOnMySQL(t *testing.T) {
	dsn := harness.MySQLDatabase(t) // before the environment is cleared: MYSQL_DSN names the server
	clearOutboxEnv(t)
	ctx := context.Background()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// A table of its own name, as a service's WithTable gives.
	if err := mysql.Migrate(ctx, db, mysql.WithTable("orders_outbox")); err != nil {
		t.Fatal(err)
	}
	s, err := mysql.New(db, mysql.WithTable("orders_outbox"))
	if err != nil {
		t.Fatal(err)
	}
	fillOutbox(t, s, func(entries ...outbox.Entry) ([]int64, error) { return s.Enqueue(ctx, db, entries...) })
	checkOutboxCommands(t, s, "--mysql-dsn", dsn, "--table", "orders_outbox")

	t.Setenv("MYSQL_DSN", dsn)
	if out, errOut, code := outboxCLI("stats", "--table", "orders_outbox"); code != 0 || !strings.Contains(out, "pending 4,") {
		t.Errorf("stats from MYSQL_DSN: exit %d %s %s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stats", "--mysql-dsn", dsn, "--database-url", "postgres://x"}, 2, "not both"},
		{[]string{"stats", "--schema", "s"}, 2, "a MySQL DSN names its database"},
		{[]string{"stats", "--table", "Bad-Name"}, 2, "--table"},
		{[]string{"stats", "--mysql-dsn", "root@tcp(127.0.0.1:1)/x?timeout=5s"}, 1, "127.0.0.1:1"},
	} {
		_, errOut, code := outboxCLI(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}
