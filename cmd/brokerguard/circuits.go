package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/internal/safetext"
)

// Exit codes of the on-call commands, for scripts. 0 is success and 2 a usage error
// (main); a failure talking to the service is 1.
const (
	exitNotFound = 3 // the destination has no live circuit
	exitRefused  = 4 // the service refused: mutations disabled, wrong token, bad input
)

// exitError carries an exit code through run's error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

const circuitsUsage = `usage: brokerguard circuits COMMAND [flags] [DESTINATION]

Commands:
  list [--wide]             every circuit (--wide: since when unhealthy, failed
                            probes, last error)
  show DESTINATION          one circuit, e.g. kafka:orders, with since when it is
                            unhealthy and its last error
  force-open DESTINATION    hold it open:   --for 10m  or  --until 2026-11-30T15:00:00Z
  force-close DESTINATION   hold it closed: the same flags
  clear DESTINATION         end the hold

Where the circuits are: exactly one of these (a flag wins over the environment):
  --url URL                 a running service's admin handler (package admin);
                            env BROKERGUARD_ADMIN_URL, token --token or BROKERGUARD_ADMIN_TOKEN
  --dynamodb-table TABLE    shared state in DynamoDB (breaker/dynamo); env
                            BROKERGUARD_DYNAMODB_TABLE; --dynamodb-endpoint or DYNAMODB_ENDPOINT
                            for a local server; AWS_REGION and AWS_ACCESS_KEY_ID,
                            AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN from the environment
  --redis-addr HOST:PORT    shared state in Redis (breaker/redis); env REDIS_ADDR;
                            --redis-prefix or BROKERGUARD_REDIS_PREFIX if the service set
                            WithKeyPrefix (default brokerguard:circuit:)
  --state-dir DIR           shared state in a filestate directory; env BROKERGUARD_STATE_DIR

On shared state no service is involved and no token is asked: access to the store
is the authority. A hold is written into the circuit's record as a replica's own
ForceOpen would be, and every replica follows it within its MaxStateStaleness. Give
--identity-prefix (env BROKERGUARD_IDENTITY_PREFIX) as the service's
WithIdentityPrefix, so that DESTINATION names its circuit; list shows the circuits
under that prefix. A circuit has a record once some replica has used it.

Exit codes: 0 done, 1 the service or store failed or could not be reached, 2 usage,
3 no such destination, 4 refused (mutations disabled, wrong token, bad input).
A command that fails prints nothing on stdout: its error, and what a listing read
before it failed, go to stderr.
`

// circuitRow is one circuit as "brokerguard circuits" prints it: the admin handler's
// view, and for a circuit read from shared state its record's key and details.
type circuitRow struct {
	admin.Circuit
	Identity string        `json:"identity,omitempty"`
	Record   *recordDetail `json:"record,omitempty"`
}

// recordDetail is what a shared record says beyond the admin view.
type recordDetail struct {
	Version      uint64      `json:"version"`
	Reason       string      `json:"reason,omitempty"` // of the transition that began the generation
	Since        *time.Time  `json:"since,omitempty"`
	FailedProbes int64       `json:"failed_probes,omitempty"`
	Leases       []leaseView `json:"leases,omitempty"`
	Policy       string      `json:"policy,omitempty"` // the fields the replicas share, in words
}

type leaseView struct {
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
}

// circuitList is the JSON of list, the admin handler's shape.
type circuitList struct {
	Now       time.Time    `json:"now"`
	Mutations bool         `json:"mutations"`
	Circuits  []circuitRow `json:"circuits"`
}

// holdSpec is what force-open and force-close ask for.
type holdSpec struct {
	holdFor       time.Duration
	until, reason string
}

// circuitSource is where the command finds circuits: a service's admin handler, or
// the shared state itself.
type circuitSource interface {
	list(ctx context.Context) (circuitList, error)
	show(ctx context.Context, dest string) (circuitRow, error)
	// hold applies "force-open", "force-close" or "clear" and returns the circuit after.
	hold(ctx context.Context, action, dest string, h holdSpec) (circuitRow, error)
	close()
}

// circuitsCmd runs "brokerguard circuits ...".
func circuitsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := askedForHelp(args, circuitsUsage, stderr); err != nil {
		return err
	}
	cmd := args[0]
	fs := flag.NewFlagSet("brokerguard circuits "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var src sourceFlags
	src.define(fs)
	asJSON := fs.Bool("json", false, "print JSON (the admin handler's shape) instead of a table")
	wide := fs.Bool("wide", false, "list: add since when each circuit is unhealthy, its failed probes and its last error")
	timeout := fs.Duration("timeout", 10*time.Second, "how long the command may take (a listing reads every circuit's record)")
	var h holdSpec
	if cmd == "force-open" || cmd == "force-close" {
		fs.DurationVar(&h.holdFor, "for", 0, "hold for this long, e.g. 10m")
		fs.StringVar(&h.until, "until", "", "hold until this RFC 3339 time")
		fs.StringVar(&h.reason, "reason", "", "why, for the audit log")
	}
	switch cmd {
	case "list", "show", "force-open", "force-close", "clear":
	default:
		fmt.Fprintf(stderr, "brokerguard circuits: unknown command %q\n\n%s", cmd, circuitsUsage)
		return errUsage
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	wantArgs := 1
	if cmd == "list" {
		wantArgs = 0
	}
	if len(pos) != wantArgs {
		fmt.Fprintf(stderr, "brokerguard circuits %s: want %d argument(s), got %d\n", cmd, wantArgs, len(pos))
		return errUsage
	}
	if (cmd == "force-open" || cmd == "force-close") && (h.holdFor == 0) == (h.until == "") {
		fmt.Fprintln(stderr, "brokerguard circuits "+cmd+": give --for or --until (one of them)")
		return errUsage
	}
	source, err := src.open(cmd, *timeout, stderr)
	if err != nil {
		return err
	}
	defer source.close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if cmd == "list" {
		list, err := source.list(ctx)
		if err != nil {
			// What a listing that failed part-way found goes to stderr, as a table,
			// before the error: stdout stays empty (see onlyOnSuccess).
			if len(list.Circuits) > 0 {
				fmt.Fprintln(stderr, "brokerguard circuits list: read before the failure:")
				_ = printCircuits(stderr, false, *wide, list, list.Circuits)
			}
			return err
		}
		return printCircuits(stdout, *asJSON, *wide, list, list.Circuits)
	}
	var row circuitRow
	if cmd == "show" {
		row, err = source.show(ctx, pos[0])
	} else {
		row, err = source.hold(ctx, cmd, pos[0], h)
	}
	if err != nil {
		return err
	}
	return printCircuits(stdout, *asJSON, false, row, []circuitRow{row})
}

// lastError is c's last error; for a circuit without one whose partitions are
// isolated, the first isolated partition's, named: the error behind its refusals.
func lastError(c circuitRow) string {
	if c.LastError != "" {
		return c.LastError
	}
	for _, p := range c.IsolatedPartitions {
		if p.LastError != "" {
			return "partition " + strconv.Itoa(p.Partition) + ": " + p.LastError
		}
	}
	return ""
}

// printCircuits prints v as JSON, or rows as a table (wide: with the health columns;
// one row: with its health and a shared record's details under the table). Text from
// the service or the store is escaped (see esc): a destination, lease owner or error
// text cannot move the terminal's cursor or forge a line.
func printCircuits(w io.Writer, asJSON, wide bool, v any, rows []circuitRow) error {
	if asJSON {
		return printJSON(w, v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "DESTINATION\tSTATE\tFAILURES\tNOT BEFORE\tOVERRIDE\tUNTIL\tMODE\tSCOPE"
	if wide {
		head += "\tUNHEALTHY SINCE\tFAILED PROBES\tLAST ERROR"
	}
	fmt.Fprintln(tw, head)
	for _, c := range rows {
		state := c.State
		if n := len(c.IsolatedPartitions); n > 0 { // keyed calls to them are refused (registry.Partitions)
			state += ", " + strconv.Itoa(n) + " partition" + map[bool]string{true: "s"}[n != 1] + " isolated"
		}
		if c.DegradedSince != nil { // the shared store refuses its evidence (sharedstate.KeepLocal)
			state += " (degraded since " + fmtTime(c.DegradedSince) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s", esc(c.Destination), esc(state), c.Failures,
			fmtTime(c.NotBefore), esc(c.Override), fmtTime(c.OverrideUntil), esc(c.Mode), esc(c.Scope))
		if wide {
			fmt.Fprintf(tw, "\t%s\t%d\t%s", fmtTime(c.UnhealthySince), c.FailedProbes, orDash(esc(lastError(c))))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) != 1 {
		return nil
	}
	printHealth(w, rows[0].Health, time.Now())
	for _, p := range rows[0].IsolatedPartitions {
		fmt.Fprintf(w, "partition %d isolated since %s after %d failures; next probe at %s",
			p.Partition, fmtTime(&p.Since), p.Failures, fmtTime(&p.NotBefore))
		if p.LastError != "" {
			fmt.Fprintf(w, "; last error: %s", esc(p.LastError))
		}
		fmt.Fprintln(w)
	}
	if rows[0].Record == nil {
		return nil
	}
	r := rows[0].Record
	fmt.Fprintf(w, "\nidentity %s, generation %d since %s (%s), version %d\n",
		esc(rows[0].Identity), rows[0].Generation, fmtTime(r.Since), esc(r.Reason), r.Version)
	for _, l := range r.Leases {
		fmt.Fprintf(w, "probe lease of %s until %s\n", esc(l.Owner), fmtTime(&l.Expires))
	}
	if r.Policy != "" {
		fmt.Fprintf(w, "policy %s\n", esc(r.Policy))
	}
	return nil
}

// printHealth prints, under one circuit, since when it is unhealthy and its last error.
func printHealth(w io.Writer, h admin.Health, now time.Time) {
	if line := h.Outage(now, time.UTC); line != "" {
		fmt.Fprintf(w, "\n%s (UTC)\n", line)
	}
	if h.LastError != "" {
		fmt.Fprintf(w, "last error at %s: %s\n", fmtTime(h.LastErrorAt), esc(h.LastError))
	}
}

// esc makes text from a service or a store safe to print: control characters escaped.
func esc(s string) string { return safetext.Escape(s) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// adminClient talks to an admin.Handler.
type adminClient struct {
	base, token string
	http        *http.Client
}

func (c adminClient) close() {}

// listPage is how many circuits list asks the service for at a time: each answer
// stays small however many circuits the service has.
const listPage = 1000

// list reads every circuit, a page at a time (admin's limit and after).
func (c adminClient) list(ctx context.Context) (circuitList, error) {
	list := circuitList{Circuits: []circuitRow{}}
	after := ""
	for {
		var page struct {
			circuitList
			NextAfter string `json:"next_after"`
		}
		path := "/api/circuits?limit=" + strconv.Itoa(listPage)
		if after != "" {
			path += "&after=" + url.QueryEscape(after)
		}
		raw, err := c.do(ctx, http.MethodGet, path, nil)
		if err == nil {
			if err = json.Unmarshal(raw, &page); err != nil {
				err = fmt.Errorf("the service's answer is not a circuit list: %w", err)
			}
		}
		if err != nil {
			return list, err
		}
		if after == "" {
			list.Now, list.Mutations = page.Now, page.Mutations
		}
		list.Circuits = append(list.Circuits, page.Circuits...)
		// A service from before paging ignores limit and answers everything at once.
		if page.NextAfter == "" || page.NextAfter <= after {
			return list, nil
		}
		after = page.NextAfter
	}
}

func (c adminClient) show(ctx context.Context, dest string) (circuitRow, error) {
	return c.circuit(c.do(ctx, http.MethodGet, "/api/circuits/"+url.PathEscape(dest), nil))
}

func (c adminClient) hold(ctx context.Context, action, dest string, h holdSpec) (circuitRow, error) {
	var body []byte
	if action != "clear" {
		req := map[string]string{"reason": h.reason}
		if h.holdFor != 0 {
			req["for"] = h.holdFor.String()
		} else {
			req["until"] = h.until
		}
		body, _ = json.Marshal(req)
	}
	return c.circuit(c.do(ctx, http.MethodPost, "/api/circuits/"+url.PathEscape(dest)+"/"+action, body))
}

func (c adminClient) circuit(raw []byte, err error) (circuitRow, error) {
	var row circuitRow
	if err == nil {
		if err = json.Unmarshal(raw, &row); err != nil {
			err = fmt.Errorf("the service's answer is not a circuit: %w", err)
		}
	}
	return row, err
}

func (c adminClient) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--url: %w", err)}
	}
	if c.token != "" && method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return raw, nil
	}
	var apiErr struct {
		Field string `json:"field"`
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(raw))
	// Only the admin handler's own JSON error says what was refused; a 4xx without it
	// (a --url that misses the handler, a proxy in the way) is the service failing.
	fromAdmin := json.Unmarshal(raw, &apiErr) == nil && apiErr.Error != ""
	if fromAdmin {
		msg = apiErr.Error
	}
	err = fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
	switch {
	case !fromAdmin && resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, fmt.Errorf("%w (is --url the admin handler's base URL?)", err)
	case resp.StatusCode == http.StatusNotFound && apiErr.Field == "destination":
		return nil, &exitError{code: exitNotFound, err: err}
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, &exitError{code: exitRefused, err: err}
	}
	return nil, err
}

// askedForHelp prints usage and returns flag.ErrHelp when args ask for help, or
// errUsage when they are empty; nil otherwise.
func askedForHelp(args []string, usage string, stderr io.Writer) error {
	if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
		return nil
	}
	fmt.Fprint(stderr, usage)
	if len(args) == 0 {
		return errUsage
	}
	return flag.ErrHelp
}

// printJSON prints v indented, as the admin handler answers.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseInterleaved parses flags that may come before or after the positional
// arguments ("show kafka:orders --json"), as kubectl and gh allow.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}
