package postgres

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// TableName is a validated, optionally schema-qualified name for the outbox table, so
// that two services can keep their outboxes apart in one database. The zero TableName
// is Table, found through the search_path. Make one with NewTableName.
type TableName struct {
	schema, name string
}

// identifier is what NewTableName accepts: lower-case letters, digits and
// underscores, not starting with a digit. Nothing else can reach the SQL, which also
// quotes the names.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// maxNameLen leaves room under PostgreSQL's 63-byte identifiers for the suffixes of
// the names derived from the table's name (HoldTable, indexes, constraints).
const maxNameLen = 48

// NewTableName returns the table name in schema (empty: the search_path's first
// schema that has it). Both must be lower-case identifiers: letters a-z, digits and
// underscores, not starting with a digit, the table's name at most 48 bytes and
// "schema.name" at most 63 (it is also the NOTIFY channel).
func NewTableName(schema, name string) (TableName, error) {
	switch {
	case !identifier.MatchString(name):
		return TableName{}, fmt.Errorf("postgres: table name %q: use lower-case letters, digits and underscores, not starting with a digit", name)
	case len(name) > maxNameLen:
		return TableName{}, fmt.Errorf("postgres: table name %q is longer than %d bytes", name, maxNameLen)
	case schema != "" && !identifier.MatchString(schema):
		return TableName{}, fmt.Errorf("postgres: schema name %q: use lower-case letters, digits and underscores, not starting with a digit", schema)
	case len(schema)+1+len(name) > 63:
		return TableName{}, fmt.Errorf("postgres: %q.%q is longer than 63 bytes", schema, name)
	}
	return TableName{schema: schema, name: name}, nil
}

// WithTable makes the Store (and Migrate) use table t instead of Table. Services that
// share a database should each have a table of their own name or schema: the NOTIFY
// channel is named after the table, so two outboxes both called Table in different
// schemas of the search_path wake each other's Listeners (harmless, but wasted claims).
func WithTable(t TableName) Option { return func(s *Store) { s.table = t } }

func (t TableName) base() string {
	if t.name == "" {
		return Table
	}
	return t.name
}

// String returns the quoted, qualified name as the SQL uses it.
func (t TableName) String() string { return t.qualified(t.base()) }

// qualified returns name, a table beside t, quoted and qualified with t's schema.
func (t TableName) qualified(name string) string {
	if t.schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{t.schema, name}.Sanitize()
}

// Channel returns the NOTIFY channel of the table: its name, qualified if it has a
// schema, as one identifier.
func (t TableName) Channel() string {
	if t.schema == "" {
		return t.base()
	}
	return t.schema + "." + t.base()
}

// ownName matches the default table's name and the names derived from it: HoldTable,
// the relay table, and index and constraint names (a suffix after an underscore).
var ownName = regexp.MustCompile(`\b` + Table + `(_[a-z_]+)?\b`)

// statements holds the SQL of one table, written once per statement.
type statements struct {
	t     TableName
	cache sync.Map // SQL written for the default table -> SQL for t
}

// sql returns stmt, written for the default table, rewritten for this one: the table
// qualified and quoted, derived names (indexes, constraints) renamed after it.
func (st *statements) sql(stmt string) string {
	if st.t == (TableName{}) {
		return stmt
	}
	if s, ok := st.cache.Load(stmt); ok {
		return s.(string)
	}
	s := ownName.ReplaceAllStringFunc(stmt, func(m string) string {
		switch m {
		case Table:
			return st.t.String()
		case HoldTable, relayTable:
			return st.t.qualified(st.t.base() + m[len(Table):])
		}
		return pgx.Identifier{st.t.base() + m[len(Table):]}.Sanitize() // an index or a constraint
	})
	st.cache.Store(stmt, s)
	return s
}

// SchemaFor returns Schema written for table t, creating t's schema, if it has one,
// under the same lock.
func SchemaFor(t TableName) string {
	st := statements{t: t}
	s := st.sql(Schema)
	if t.schema != "" {
		schema := pgx.Identifier{t.schema}.Sanitize()
		s = strings.Replace(s, "CREATE TABLE", "CREATE SCHEMA IF NOT EXISTS "+schema+";\n\nCREATE TABLE", 1)
		// An index is created in its table's schema, but found for DROP INDEX through
		// the search_path: name its schema.
		s = strings.ReplaceAll(s, `DROP INDEX IF EXISTS "`, `DROP INDEX IF EXISTS `+schema+`."`)
	}
	return s
}
