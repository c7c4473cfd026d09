package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
)

// schemaComment marks tables made by this version's Schema; Migrate changes nothing
// when all three carry it.
const schemaComment = "brokerguard outbox, schema 1"

// Migrate creates the outbox tables in the connection's database if they do not
// exist. It is safe to run from many processes at once and while relays work: it
// takes a named lock (GET_LOCK) so that concurrent runs take turns; it runs no DDL
// when the tables exist with this version's schema, so a rolling deploy's restarts
// take no metadata lock; and a DDL statement waits for a table's metadata lock (held
// by any open transaction that touched the table) at most the Store's timeout
// (lock_wait_timeout), failing rather than queueing every later statement on the
// table behind it. Of the options WithTable and WithTimeout matter here. The
// connection it used is closed afterwards rather than returned to the pool with its
// settings.
func Migrate(ctx context.Context, db *sql.DB, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	if err := migrate(ctx, db, c); err != nil {
		return fmt.Errorf("mysql: migrate: %w", err)
	}
	return nil
}

func migrate(ctx context.Context, db *sql.DB, c config) (err error) {
	wait := int64(0)
	if c.timeout > 0 {
		wait = int64((c.timeout + 999_999_999) / 1_000_000_000)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*c.timeout) // the lock's wait, then the DDL's
		defer cancel()
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // drop the session: its lock, its settings
		_ = conn.Close()
	}()
	lockWait := wait
	if lockWait == 0 {
		lockWait = -1 // GET_LOCK waits for good
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, "brokerguard_migrate."+c.table, lockWait).Scan(&got); err != nil {
		return err
	}
	if got.Int64 != 1 {
		return errors.New("another Migrate held the lock " + "brokerguard_migrate." + c.table + " for longer than the timeout")
	}
	names := []string{c.table, c.table + "_hold", c.table + "_lock"}
	current, err := tablesCurrent(ctx, conn, names)
	if err != nil || current {
		return err
	}
	if wait > 0 {
		if _, err := conn.ExecContext(ctx, `SET SESSION lock_wait_timeout = ?`, wait); err != nil {
			return err
		}
	}
	for _, stmt := range statements(renamer(c.table).Replace(Schema)) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// tablesCurrent reports whether every table of names exists with schemaComment.
func tablesCurrent(ctx context.Context, conn *sql.Conn, names []string) (bool, error) {
	rows, err := conn.QueryContext(ctx, `SELECT table_name, table_comment FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name IN (?, ?, ?)`, names[0], names[1], names[2])
	if err != nil {
		return false, err
	}
	defer rows.Close()
	current := 0
	for rows.Next() {
		var name, comment string
		if err := rows.Scan(&name, &comment); err != nil {
			return false, err
		}
		if comment == schemaComment {
			current++
		}
	}
	return current == len(names), rows.Err()
}

// statements splits a schema into its statements: each ends with ";" at the end of a
// line; comment lines are dropped.
func statements(schema string) []string {
	var (
		out []string
		cur strings.Builder
	)
	for line := range strings.Lines(schema) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	return out
}
