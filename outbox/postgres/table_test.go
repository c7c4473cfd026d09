package postgres

import (
	"strings"
	"testing"
)

func TestNewTableNameRefusesWhatIsNotAPlainIdentifier(t *testing.T) {
	for _, tc := range []struct{ schema, name string }{
		{"", ""},
		{"", `outbox"; DROP TABLE users; --`},
		{"", "Outbox"},
		{"", "1outbox"},
		{"", "out box"},
		{"", "outbox\x00"},
		{"billing;", "outbox"},
		{"Billing", "outbox"},
		{"", strings.Repeat("a", 49)},
		{strings.Repeat("s", 20), strings.Repeat("a", 43)}, // "s.a" is 64 bytes
	} {
		if tbl, err := NewTableName(tc.schema, tc.name); err == nil {
			t.Errorf("NewTableName(%q, %q) = %v, want an error", tc.schema, tc.name, tbl)
		}
	}
	for _, tc := range []struct{ schema, name, sql, channel string }{
		{"", "outbox", `"outbox"`, "outbox"},
		{"billing", "outbox_2", `"billing"."outbox_2"`, "billing.outbox_2"},
		{"_s", strings.Repeat("a", 48), `"_s"."` + strings.Repeat("a", 48) + `"`, "_s." + strings.Repeat("a", 48)},
		// "schema.name" of exactly 63 bytes, PostgreSQL's longest channel name.
		{strings.Repeat("s", 14), strings.Repeat("a", 48), `"` + strings.Repeat("s", 14) + `"."` + strings.Repeat("a", 48) + `"`, strings.Repeat("s", 14) + "." + strings.Repeat("a", 48)},
	} {
		tbl, err := NewTableName(tc.schema, tc.name)
		if err != nil {
			t.Errorf("NewTableName(%q, %q): %v", tc.schema, tc.name, err)
			continue
		}
		if tbl.String() != tc.sql || tbl.Channel() != tc.channel {
			t.Errorf("NewTableName(%q, %q) = %s on channel %q, want %s on %q", tc.schema, tc.name, tbl, tbl.Channel(), tc.sql, tc.channel)
		}
	}
}

func TestTheZeroTableNameIsTheDefault(t *testing.T) {
	var tbl TableName
	if tbl.String() != `"`+Table+`"` || tbl.Channel() != Table {
		t.Errorf("zero TableName = %s on %q", tbl, tbl.Channel())
	}
	if SchemaFor(tbl) != Schema {
		t.Error("SchemaFor(zero) differs from Schema")
	}
}

func TestStatementsAreWrittenForTheTable(t *testing.T) {
	tbl, err := NewTableName("billing", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	st := statements{t: tbl}
	got := st.sql(`SELECT 1 FROM ` + Table + ` o JOIN ` + HoldTable + ` h USING (destination)`)
	if want := `SELECT 1 FROM "billing"."outbox" o JOIN "billing"."outbox_hold" h USING (destination)`; got != want {
		t.Errorf("rewritten:\n%s\nwant\n%s", got, want)
	}
	schema := SchemaFor(tbl)
	for _, want := range []string{
		`CREATE SCHEMA IF NOT EXISTS "billing"`,
		`CREATE TABLE IF NOT EXISTS "billing"."outbox" (`,
		`CONSTRAINT "outbox_status_check"`,
		`CREATE INDEX IF NOT EXISTS "outbox_pending"`,
		`CREATE TABLE IF NOT EXISTS "billing"."outbox_hold" (`,
		`DROP INDEX IF EXISTS "billing"."outbox_due"`,
	} {
		if !strings.Contains(schema, want) {
			t.Errorf("SchemaFor lacks %q", want)
		}
	}
	if strings.Contains(schema, Table) {
		t.Errorf("SchemaFor still names %s:\n%s", Table, schema)
	}
	if strings.Index(schema, "pg_advisory_xact_lock") > strings.Index(schema, "CREATE SCHEMA") {
		t.Error("the schema is created before the migration's lock is taken")
	}
}
