package harness

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPostgresClusterRestartsAndPgBouncerForwards starts a cluster of the test's own,
// restarts it (a connection from before is broken, a new one works on the same port),
// and reaches it through a PgBouncer of the test's own.
func TestPostgresClusterRestartsAndPgBouncerForwards(t *testing.T) {
	c := NewPostgresCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("a connection from before the restart still answers")
	}
	again, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	defer again.Close(ctx)

	b := StartPgBouncer(t, c.Addr(), "transaction")
	via, err := pgx.Connect(ctx, "postgres://postgres@"+b.Addr()+"/postgres?sslmode=disable&default_query_exec_mode=exec")
	if err != nil {
		t.Fatalf("through pgbouncer: %v\n%s", err, b.Log())
	}
	defer via.Close(ctx)
	var port int
	if err := via.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil || port != c.Port() {
		t.Errorf("through pgbouncer: server port %d, %v; want %d", port, err, c.Port())
	}
}
