package main

import (
	"database/sql"
	"fmt"
	"io"

	_ "github.com/go-sql-driver/mysql" // database/sql's "mysql" driver

	"github.com/brokerguard/brokerguard/outbox/mysql"
)

// openMySQL returns the outbox in the MySQL or MariaDB database of --mysql-dsn.
func (o *outboxFlags) openMySQL(stderr io.Writer) (outboxSource, error) {
	if o.schema != "" {
		fmt.Fprintln(stderr, "brokerguard outbox: --schema goes with --database-url; a MySQL DSN names its database")
		return nil, errUsage
	}
	var opts []mysql.Option
	if o.table != "" {
		opts = append(opts, mysql.WithTable(o.table))
	}
	db, err := sql.Open("mysql", o.mysqlDSN)
	if err != nil {
		fmt.Fprintf(stderr, "brokerguard outbox: --mysql-dsn: %v\n", err)
		return nil, errUsage
	}
	s, err := mysql.New(db, opts...)
	if err != nil {
		db.Close()
		fmt.Fprintf(stderr, "brokerguard outbox: --table: %v\n", err)
		return nil, errUsage
	}
	return outboxDB{s, func() { db.Close() }}, nil
}
