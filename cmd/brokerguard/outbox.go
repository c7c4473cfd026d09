package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

const outboxUsage = `usage: brokerguard outbox COMMAND [flags] [ID...]

Commands:
  stats                     backlog (total and per destination), held destinations
                            and their hold end, dead rows by reason; a PostgreSQL
                            destination past 10,000 pending rows shows an estimate (~),
                            --exact counts every row (with --database-url)
  dead                      one page of dead rows, by ascending id:
                            --destination kafka:orders, --reason attempts_exhausted,
                            --after ID (the last id of the previous page), --limit N (1-500)
  requeue [ID...]           make dead rows pending again: the ids given, or those of
                            --destination and/or --reason (an empty filter is refused)

Where the outbox is: exactly one of these (a flag wins over the environment):
  --database-url URL        the PostgreSQL database of the outbox table (env DATABASE_URL);
                            --schema and --table as the service's postgres.WithTable
  --mysql-dsn DSN           the MySQL or MariaDB database of the outbox table, in
                            go-sql-driver/mysql's form, e.g. 'user:pw@tcp(db:3306)/app'
                            (env MYSQL_DSN, read when neither DATABASE_URL nor
                            BROKERGUARD_ADMIN_URL is set); --table as the service's mysql.WithTable
  --url URL                 a running service's admin handler (package admin), env
                            BROKERGUARD_ADMIN_URL; requeue needs --token or BROKERGUARD_ADMIN_TOKEN

Exit codes: 0 done, 1 the service or database failed or could not be reached,
2 usage, 4 refused (mutations disabled, wrong token, bad input). A command that
fails prints nothing on stdout, only its error on stderr.
`

// outboxSource is where "brokerguard outbox" reads and requeues: the database, or a
// service's admin handler. Both answer in the admin handler's JSON shapes.
type outboxSource interface {
	stats(ctx context.Context) (admin.OutboxStats, error)
	dead(ctx context.Context, f outbox.DeadFilter, p outbox.Page) (admin.DeadPage, error)
	requeue(ctx context.Context, f outbox.DeadFilter) (int, error)
	close()
}

// outboxFlags are the flags of "brokerguard outbox".
type outboxFlags struct {
	databaseURL, mysqlDSN, schema, table string
	url, token                           string
	destination, reason                  string
	after                                int64
	limit                                int
	exact                                bool // stats: count every pending row
}

// outboxCmd runs "brokerguard outbox ...".
func outboxCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := askedForHelp(args, outboxUsage, stderr); err != nil {
		return err
	}
	cmd := args[0]
	switch cmd {
	case "stats", "dead", "requeue":
	default:
		fmt.Fprintf(stderr, "brokerguard outbox: unknown command %q\n\n%s", cmd, outboxUsage)
		return errUsage
	}
	fs := flag.NewFlagSet("brokerguard outbox "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o outboxFlags
	asJSON, timeout := o.define(fs, cmd)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "brokerguard outbox "+cmd+": "+format+"\n", a...)
		return errUsage
	}
	if cmd != "requeue" && len(pos) > 0 {
		return usageErr("takes no arguments, got %q", pos)
	}
	var f outbox.DeadFilter
	for _, s := range pos {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return usageErr("%q is not a row id (a positive whole number)", s)
		}
		f.IDs = append(f.IDs, id)
	}
	if o.destination != "" {
		if f.Destination, err = transport.ParseDestination(o.destination); err != nil {
			return usageErr("--destination: %v", err)
		}
	}
	f.Reason = o.reason
	if cmd == "requeue" && f.IsZero() {
		return usageErr("give row ids, or --destination and/or --reason: requeueing every dead row at once is refused")
	}
	if cmd == "dead" && (o.limit < 1 || o.limit > admin.MaxDeadPage || o.after < 0) {
		return usageErr("--limit must be from 1 to %d and --after at least 0", admin.MaxDeadPage)
	}
	source, err := o.open(cmd, *timeout, stderr)
	if err != nil {
		return err
	}
	defer source.close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch cmd {
	case "stats":
		st, err := source.stats(ctx)
		if err != nil {
			return err
		}
		return printOutbox(stdout, *asJSON, st, func(w io.Writer) { statsTable(w, st) })
	case "dead":
		page, err := source.dead(ctx, f, outbox.Page{After: o.after, Limit: o.limit})
		if err != nil {
			return err
		}
		return printOutbox(stdout, *asJSON, page, func(w io.Writer) { deadTable(w, page) })
	}
	n, err := source.requeue(ctx, f)
	if err != nil {
		return err
	}
	return printOutbox(stdout, *asJSON, admin.Requeued{Requeued: n}, func(w io.Writer) {
		fmt.Fprintf(w, "requeued %d dead rows\n", n)
	})
}

// define defines the flags of "brokerguard outbox cmd" on fs, into o, and returns
// the two that are not the source's.
func (o *outboxFlags) define(fs *flag.FlagSet, cmd string) (asJSON *bool, timeout *time.Duration) {
	fs.StringVar(&o.databaseURL, "database-url", "", "PostgreSQL URL of the outbox's database (env DATABASE_URL)")
	fs.StringVar(&o.mysqlDSN, "mysql-dsn", "", "MySQL/MariaDB DSN of the outbox's database (env MYSQL_DSN)")
	fs.StringVar(&o.schema, "schema", "", "schema of the outbox table (default: the search_path's)")
	fs.StringVar(&o.table, "table", "", "name of the outbox table (default "+postgres.Table+")")
	fs.StringVar(&o.url, "url", "", "the admin handler's base URL, e.g. http://svc:8080/admin (env BROKERGUARD_ADMIN_URL)")
	fs.StringVar(&o.token, "token", "", "bearer token for requeue through --url (env BROKERGUARD_ADMIN_TOKEN)")
	asJSON = fs.Bool("json", false, "print JSON (the admin handler's shape) instead of a table")
	timeout = fs.Duration("timeout", 30*time.Second, "how long the command may take")
	if cmd == "stats" {
		fs.BoolVar(&o.exact, "exact", false, "count every pending row (PostgreSQL), not an estimate past 10,000 a destination")
	}
	if cmd != "stats" {
		fs.StringVar(&o.destination, "destination", "", "only dead rows of this destination, e.g. kafka:orders")
		fs.StringVar(&o.reason, "reason", "", "only dead rows with this reason, e.g. attempts_exhausted")
	}
	if cmd == "dead" {
		fs.Int64Var(&o.after, "after", 0, "rows after this id (the previous page's last)")
		fs.IntVar(&o.limit, "limit", outbox.DefaultPageLimit, "rows per page, 1 to "+strconv.Itoa(admin.MaxDeadPage))
	}
	return asJSON, timeout
}

// open returns the one source the flags, or else the environment, name.
func (o *outboxFlags) open(cmd string, timeout time.Duration, stderr io.Writer) (outboxSource, error) {
	if o.databaseURL == "" && o.mysqlDSN == "" && o.url == "" {
		o.databaseURL, o.url = os.Getenv("DATABASE_URL"), os.Getenv("BROKERGUARD_ADMIN_URL")
		if o.databaseURL == "" && o.url == "" {
			o.mysqlDSN = os.Getenv("MYSQL_DSN")
		}
	}
	places := 0
	for _, p := range []string{o.databaseURL, o.mysqlDSN, o.url} {
		if p != "" {
			places++
		}
	}
	switch {
	case places == 0:
		fmt.Fprintln(stderr, "brokerguard outbox: give --database-url, --mysql-dsn or --url (or DATABASE_URL, MYSQL_DSN or BROKERGUARD_ADMIN_URL)")
		return nil, errUsage
	case places > 1:
		fmt.Fprintln(stderr, "brokerguard outbox: give one place to find the outbox, not both a database and --url")
		return nil, errUsage
	case o.exact && o.databaseURL == "":
		fmt.Fprintln(stderr, "brokerguard outbox stats: --exact goes with --database-url (the others count every row already, or serve the service's reading)")
		return nil, errUsage
	case o.mysqlDSN != "":
		return o.openMySQL(stderr)
	case o.url != "":
		if o.schema != "" || o.table != "" {
			fmt.Fprintln(stderr, "brokerguard outbox: --schema and --table go with --database-url or --mysql-dsn; the service knows its table")
			return nil, errUsage
		}
		if o.token == "" {
			o.token = os.Getenv("BROKERGUARD_ADMIN_TOKEN")
		}
		if cmd == "requeue" && o.token == "" {
			fmt.Fprintln(stderr, "brokerguard outbox requeue: --token (or BROKERGUARD_ADMIN_TOKEN) is required with --url")
			return nil, errUsage
		}
		return outboxClient{adminClient{base: strings.TrimSuffix(o.url, "/"), token: o.token, http: &http.Client{Timeout: timeout}}}, nil
	}
	var opts []postgres.Option
	if o.exact {
		opts = append(opts, postgres.WithExactBacklog())
	}
	if o.schema != "" || o.table != "" {
		name := o.table
		if name == "" {
			name = postgres.Table
		}
		t, err := postgres.NewTableName(o.schema, name)
		if err != nil {
			fmt.Fprintf(stderr, "brokerguard outbox: --schema/--table: %v\n", err)
			return nil, errUsage
		}
		opts = append(opts, postgres.WithTable(t))
	}
	pool, err := pgxpool.New(context.Background(), o.databaseURL)
	if err != nil {
		fmt.Fprintf(stderr, "brokerguard outbox: --database-url: %v\n", err)
		return nil, errUsage
	}
	return outboxDB{postgres.New(pool, opts...), pool.Close}, nil
}

// outboxDB reads and requeues in the outbox table itself; access to the database is
// the authority.
type outboxDB struct {
	store interface {
		admin.Outbox
		outbox.DeadLetters
	}
	done func() // closes the store's pool
}

func (s outboxDB) close() { s.done() }

func (s outboxDB) stats(ctx context.Context) (admin.OutboxStats, error) {
	st := admin.ReadOutbox(ctx, s.store, time.Now())
	if st.Error != nil {
		return st, fmt.Errorf("outbox stats: %s", *st.Error)
	}
	return st, nil
}

func (s outboxDB) dead(ctx context.Context, f outbox.DeadFilter, p outbox.Page) (admin.DeadPage, error) {
	return admin.ReadDeadPage(ctx, s.store, f, p)
}

func (s outboxDB) requeue(ctx context.Context, f outbox.DeadFilter) (int, error) {
	n, err := s.store.Requeue(ctx, f, time.Now())
	if err != nil {
		return n, fmt.Errorf("requeue stopped after %d rows: %w", n, err)
	}
	return n, nil
}

// outboxClient reads and requeues through a service's admin handler.
type outboxClient struct{ adminClient }

func (c outboxClient) stats(ctx context.Context) (admin.OutboxStats, error) {
	var st admin.OutboxStats
	err := c.get(ctx, "/api/outbox", &st)
	if err == nil && !st.Enabled {
		err = &exitError{code: exitRefused, err: fmt.Errorf("%s serves no outbox (the service did not use admin.WithOutbox)", c.base)}
	}
	return st, err
}

func (c outboxClient) dead(ctx context.Context, f outbox.DeadFilter, p outbox.Page) (admin.DeadPage, error) {
	q := url.Values{"after": {strconv.FormatInt(p.After, 10)}, "limit": {strconv.Itoa(p.Limit)}}
	if f.Destination != (transport.Destination{}) {
		q.Set("destination", f.Destination.String())
	}
	if f.Reason != "" {
		q.Set("reason", f.Reason)
	}
	var page admin.DeadPage
	return page, c.get(ctx, "/api/outbox/dead?"+q.Encode(), &page)
}

func (c outboxClient) requeue(ctx context.Context, f outbox.DeadFilter) (int, error) {
	req := admin.RequeueRequest{IDs: f.IDs, Reason: f.Reason}
	if f.Destination != (transport.Destination{}) {
		req.Destination = f.Destination.String()
	}
	body, _ := json.Marshal(req) // ints and strings always marshal
	raw, err := c.do(ctx, http.MethodPost, "/api/outbox/requeue", body)
	var out admin.Requeued
	if err == nil {
		err = decodeAnswer(raw, &out)
	}
	return out.Requeued, err
}

func (c outboxClient) get(ctx context.Context, path string, v any) error {
	raw, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return decodeAnswer(raw, v)
}

func decodeAnswer(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("the service's answer is not what the admin handler sends: %w", err)
	}
	return nil
}

// printOutbox prints v as JSON, or as text through table.
func printOutbox(w io.Writer, asJSON bool, v any, table func(io.Writer)) error {
	if asJSON {
		return printJSON(w, v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// ms prints n milliseconds as a duration, to the second from ten seconds on.
func ms(n int64) string {
	d := time.Duration(n) * time.Millisecond
	if d >= 10*time.Second {
		d = d.Round(time.Second)
	}
	return d.String()
}

// count prints n, marked "~" when it is an estimate.
func count(n int64, estimated bool) string {
	if estimated {
		return "~" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// statsTable answers "how far behind is the outbox": the backlog per destination,
// with each held destination's hold end and, when it is held for being unusable
// rather than for an outage, why; then the dead rows by reason.
func statsTable(w io.Writer, st admin.OutboxStats) {
	fmt.Fprintf(w, "pending %s, oldest waiting %s\n\n", count(st.Pending, st.Estimated), ms(st.OldestMS))
	held := map[string]admin.HeldDestination{}
	for _, h := range st.Held {
		held[h.Destination] = h
	}
	fmt.Fprintln(w, "DESTINATION\tPENDING\tOLDEST\tHELD UNTIL\tREMAINING\tUNUSABLE")
	line := func(dest string, pending string, oldest string) {
		until, remaining, unusable := "-", "-", "-"
		if h, ok := held[dest]; ok {
			until, remaining = fmtTime(&h.Until), ms(h.RemainingMS)
			if h.Unusable != "" {
				unusable = strconv.Quote(h.Unusable)
			}
			delete(held, dest)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", esc(dest), pending, oldest, until, remaining, unusable)
	}
	for _, d := range st.Destinations {
		line(d.Destination, count(d.Pending, d.Estimated), ms(d.OldestMS))
	}
	for _, h := range st.Held { // held with nothing pending
		if _, ok := held[h.Destination]; ok {
			line(h.Destination, "0", "-")
		}
	}
	fmt.Fprintln(w, "\nDEAD REASON\tROWS")
	for _, d := range st.Dead {
		fmt.Fprintf(w, "%s\t%d\n", esc(d.Reason), d.Rows)
	}
}

// deadTable lists a page of dead rows and says how to ask for the next.
func deadTable(w io.Writer, page admin.DeadPage) {
	fmt.Fprintln(w, "ID\tDESTINATION\tREASON\tATTEMPTS\tDEFERRALS\tDEAD SINCE\tLAST ERROR")
	for _, r := range page.Rows {
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", r.ID, esc(r.Destination), esc(r.Reason), r.Attempts, r.Deferrals,
			fmtTime(r.SettledAt), strconv.Quote(r.LastError))
	}
	if page.NextAfter != 0 {
		fmt.Fprintf(w, "\nmore: --after %d\n", page.NextAfter)
	}
}
