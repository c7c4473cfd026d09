package postgres_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// pgOtherDriver is a database/sql driver that is not pgx's.
type pgOtherDriver struct{}

func (pgOtherDriver) Connect(context.Context) (driver.Conn, error) { return pgOtherConn{}, nil }
func (pgOtherDriver) Driver() driver.Driver                        { return nil }

type pgOtherConn struct{}

func (pgOtherConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (pgOtherConn) Close() error                        { return nil }
func (pgOtherConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }

// SQLConn hands the listen function pgx's connection and returns what it returned;
// a database/sql pool on another driver is an error, and the function is not called.
func TestSQLConnNeedsThePgxDriver(t *testing.T) {
	ctx := context.Background()
	other := sql.OpenDB(pgOtherDriver{})
	defer other.Close()
	called := false
	err := postgres.SQLConn(other)(ctx, func(*pgx.Conn) error { called = true; return nil })
	if err == nil || called || !strings.Contains(err.Error(), "pgx driver") {
		t.Fatalf("SQLConn on another driver: %v (listen called: %v), want an error naming the pgx driver", err, called)
	}

	db := stdlib.OpenDBFromPool(pgTestPool(t))
	defer db.Close()
	var pid uint32
	if err := postgres.SQLConn(db)(ctx, func(c *pgx.Conn) error { pid = c.PgConn().PID(); return nil }); err != nil || pid == 0 {
		t.Fatalf("SQLConn with a listen that ended well: %v (pid %d), want nil", err, pid)
	}
	errDone := errors.New("listen ended")
	if err := postgres.SQLConn(db)(ctx, func(*pgx.Conn) error { return errDone }); err != errDone {
		t.Fatalf("SQLConn: %v, want listen's error", err)
	}
}
