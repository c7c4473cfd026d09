// Command brokerguard is the demo and the on-call tool of brokerguard.
//
// "brokerguard circuits" lists, shows and holds the circuits of a running service
// through its admin handler (package admin):
//
//	brokerguard circuits list --url http://svc:8080/admin
//	brokerguard circuits force-open kafka:payments --for 10m --reason "broker upgrade"
//
// Flags read the same environment variables (BROKERGUARD_ADMIN_URL,
// BROKERGUARD_ADMIN_TOKEN); --json prints the service's JSON; exit codes: 0 done, 1 the
// service failed or could not be reached, 2 usage, 3 no such destination, 4 refused.
// A command that fails writes nothing on standard output, only its error on
// standard error, so "brokerguard circuits list --json | jq" never reads a document
// from a failed call.
// Shared circuits are also read and held in their shared state, with no service and
// no policy: --dynamodb-table, --redis-addr or --state-dir instead of --url.
//
// "brokerguard policy" shows a running service's policy set, its version and history,
// and dry-runs, applies and rolls back changes through its admin handler, with the
// mutation token:
//
//	brokerguard policy dry-run tighter.json --url http://svc:8080/admin
//	brokerguard policy apply tighter.json --reason "payments flapping" --expires-in 2h
//
// "brokerguard outbox" answers how far behind the outbox is, from its PostgreSQL
// table or a service's admin handler, and pages and requeues dead rows:
//
//	brokerguard outbox stats --database-url postgres://... [--schema s --table t]
//	brokerguard outbox dead --url http://svc:8080/admin --reason attempts_exhausted
//	brokerguard outbox requeue --destination kafka:orders --reason circuit_deferral_exhausted
//
// "brokerguard demo" runs an outbox dispatching to three Kafka
// topics while one of them goes through a scripted outage, showing per topic the
// circuit state and what was published, deferred and pending; then a summary that
// proves nothing was lost, and an SVG timeline.
//
//	go run ./cmd/brokerguard demo            # in-process Kafka (kfake) and outbox; nothing to install
//	go run ./cmd/brokerguard demo --help     # every flag
//
// Flags point it at real servers instead: --kafka-brokers, --amqp-url, --sqs-endpoint,
// --database-url; --metrics ADDR serves Prometheus metrics while it runs, --http ADDR
// the admin dashboard (on the same listener when the addresses are equal). On a
// terminal the table of destinations is redrawn in place; --plain, or output to a pipe,
// prints it anew every tick.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	var exit *exitError
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case errors.As(err, &exit):
		fmt.Fprintln(os.Stderr, "brokerguard:", esc(err.Error())) // errors quote services and stores
		os.Exit(exit.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "brokerguard:", esc(err.Error()))
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// isHelp reports whether arg asks for the usage.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// config is what the flags say.
type config struct {
	duration, outageStart, outageLength, breakDuration time.Duration
	topics                                             []string
	outageTopic                                        string
	rate                                               int
	svg, metrics, http                                 string
	plain                                              bool // --plain: no live table, even on a terminal
	live                                               bool // redraw the table in place: stdout is a terminal and not --plain
	kafkaBrokers, amqpURL, sqsEndpoint, databaseURL    string
}

const usage = `usage: brokerguard COMMAND [flags]

  demo       an outbox dispatching to Kafka through a scripted outage (demo --help)
  circuits   list, show and hold circuits of a running service or in shared state (circuits --help)
  outbox     the outbox's backlog, holds and dead rows; requeue dead rows (outbox --help)
  policy     show, dry-run, apply and roll back a running service's policies (policy --help)
`

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("brokerguard demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var topics string
	short := fs.Bool("short", false, "a 4-second run with a 1.5-second outage (what the tests run)")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "how long producers enqueue; the demo then drains the outbox")
	fs.StringVar(&topics, "topics", "orders,payments,audit", "comma-separated Kafka topics to publish to")
	fs.StringVar(&c.outageTopic, "outage-topic", "payments", "the topic whose broker answers errors during the outage (in-process Kafka only)")
	fs.DurationVar(&c.outageStart, "outage-start", 5*time.Second, "when the outage begins")
	fs.DurationVar(&c.outageLength, "outage-length", 8*time.Second, "how long the outage lasts")
	fs.DurationVar(&c.breakDuration, "break", 2*time.Second, "the circuits' BreakDuration")
	fs.IntVar(&c.rate, "rate", 200, "messages per second enqueued per destination")
	fs.StringVar(&c.svg, "svg", "brokerguard-timeline.svg", "where to write the timeline of circuit state and throughput")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics on this address while the demo runs (e.g. :9464)")
	fs.StringVar(&c.http, "http", "", "serve the admin dashboard and API under /admin/ on this address while the demo runs (e.g. :8080; may equal --metrics)")
	fs.BoolVar(&c.plain, "plain", false, "print a new table every tick instead of redrawing one table in place (the default when stdout is not a terminal)")
	fs.StringVar(&c.kafkaBrokers, "kafka-brokers", "", "comma-separated Kafka brokers to use instead of the in-process one (no scripted outage)")
	fs.StringVar(&c.amqpURL, "amqp-url", "", "also publish to RabbitMQ exchange brokerguard-demo at this URL")
	fs.StringVar(&c.sqsEndpoint, "sqs-endpoint", "", "also publish to SQS queue brokerguard-demo at this endpoint (AWS credentials from the environment)")
	fs.StringVar(&c.databaseURL, "database-url", "", "keep the outbox in PostgreSQL at this URL instead of memory")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: brokerguard demo [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Producers enqueue into a transactional outbox; a dispatcher publishes through")
		fmt.Fprintln(stderr, "per-destination circuit breakers while one topic's broker fails for a while.")
		fmt.Fprintln(stderr, "The run ends with a summary (enqueued = published) and an SVG timeline.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "brokerguard demo: unexpected argument %q\n", fs.Arg(0))
		return config{}, errUsage
	}
	if *short {
		c.duration, c.outageStart, c.outageLength, c.breakDuration, c.rate = 4*time.Second, time.Second, 1500*time.Millisecond, 300*time.Millisecond, 100
	}
	for _, t := range strings.Split(topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			c.topics = append(c.topics, t)
		}
	}
	switch {
	case len(c.topics) == 0:
		return config{}, fmt.Errorf("--topics: no topic given")
	case c.duration <= 0 || c.rate <= 0 || c.breakDuration <= 0:
		return config{}, fmt.Errorf("--duration, --rate and --break must be positive")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "circuits" {
		return onlyOnSuccess(stdout, func(out io.Writer) error { return circuitsCmd(ctx, args[1:], out, stderr) })
	}
	if len(args) > 0 && args[0] == "policy" {
		return onlyOnSuccess(stdout, func(out io.Writer) error { return policyCmd(ctx, args[1:], out, stderr) })
	}
	if len(args) > 0 && args[0] == "outbox" {
		return onlyOnSuccess(stdout, func(out io.Writer) error { return outboxCmd(ctx, args[1:], out, stderr) })
	}
	if len(args) > 0 && isHelp(args[0]) { // asked for: the usage on stdout, exit 0
		fmt.Fprint(stdout, usage)
		return nil
	}
	if len(args) == 0 || args[0] != "demo" {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	c.live = !c.plain && isTerminal(stdout)
	return demo(ctx, c, stdout)
}

// onlyOnSuccess runs cmd with a buffer for its standard output and copies the buffer
// to stdout only when cmd succeeds: a script reading "brokerguard circuits list
// --json" never takes a half-written or empty document for the answer while the
// exit code says the command failed. What a failed command has to say goes to
// stderr.
func onlyOnSuccess(stdout io.Writer, cmd func(out io.Writer) error) error {
	var buf bytes.Buffer
	if err := cmd(&buf); err != nil {
		return err
	}
	_, err := stdout.Write(buf.Bytes())
	return err
}
