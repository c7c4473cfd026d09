package harness

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestPostgresSchemaIsolation(t *testing.T) {
	base, err := Postgres()
	Require(t, ServicePostgres, err)

	var schemaA string
	t.Run("two schemas", func(t *testing.T) {
		a, b := connect(t, PostgresSchema(t)), connect(t, PostgresSchema(t))
		var schemaB string
		if err := a.QueryRow(t.Context(), "SELECT current_schema()").Scan(&schemaA); err != nil {
			t.Fatal(err)
		}
		if err := b.QueryRow(t.Context(), "SELECT current_schema()").Scan(&schemaB); err != nil {
			t.Fatal(err)
		}
		if schemaA == schemaB || schemaA == "public" || schemaB == "public" {
			t.Fatalf("current schemas %q and %q; want two fresh schemas", schemaA, schemaB)
		}
		if _, err := a.Exec(t.Context(), "CREATE TABLE things (id int); INSERT INTO things VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		var inA, inB bool
		if err := a.QueryRow(t.Context(), "SELECT to_regclass('things') IS NOT NULL").Scan(&inA); err != nil {
			t.Fatal(err)
		}
		if err := b.QueryRow(t.Context(), "SELECT to_regclass('things') IS NOT NULL").Scan(&inB); err != nil {
			t.Fatal(err)
		}
		if !inA || inB {
			t.Fatalf("table visible in A: %v, in B: %v; want only in A", inA, inB)
		}
	})

	var exists bool
	err = connect(t, base).QueryRow(t.Context(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schemaA).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	if schemaA == "" || exists {
		t.Fatalf("schema %q still exists after its test ended", schemaA)
	}
}
