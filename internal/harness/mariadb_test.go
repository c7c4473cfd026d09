package harness

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// The private server keeps its data across a restart, and its user app is stopped by
// read_only where root is not.
func TestMariaDBRestartAndReadOnly(t *testing.T) {
	m := NewMariaDB(t)
	root, err := sql.Open("mysql", m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	app, err := sql.Open("mysql", m.AppDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if _, err := app.Exec("CREATE TABLE kept (n INT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec("INSERT INTO kept VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := app.QueryRow("SELECT n FROM kept").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the restart: %d, %v; want the row written before", n, err)
	}
	if _, err := root.Exec("SET GLOBAL read_only = ON"); err != nil {
		t.Fatal(err)
	}
	_, err = app.Exec("INSERT INTO kept VALUES (2)")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1290 {
		t.Fatalf("insert as app under read_only: %v; want error 1290", err)
	}
}

// MySQLDatabase gives each test a database of its own on the shared server.
func TestMySQLDatabase(t *testing.T) {
	a, b := MySQLDatabase(t), MySQLDatabase(t)
	ca, _ := mysql.ParseDSN(a)
	cb, _ := mysql.ParseDSN(b)
	if ca.DBName == cb.DBName {
		t.Fatalf("two databases named %s", ca.DBName)
	}
	db, err := sql.Open("mysql", a)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE t (n INT)"); err != nil {
		t.Fatal(err)
	}
}
