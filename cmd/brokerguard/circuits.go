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
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/brokerguard/brokerguard/admin"
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

Commands, against a running service's admin handler (package admin):
  list                      every live circuit
  show DESTINATION          one circuit, e.g. kafka:orders
  force-open DESTINATION    hold it open:   --for 10m  or  --until 2026-11-30T15:00:00Z
  force-close DESTINATION   hold it closed: the same flags
  clear DESTINATION         end the hold

Shared circuits (DynamoDB, Redis, a state directory) hold fleet-wide whichever
replica's handler applied the override.

Exit codes: 0 done, 1 the service could not be reached or failed, 2 usage,
3 no such destination, 4 refused (mutations disabled, wrong token, bad input).
`

// circuitsCmd runs "brokerguard circuits ...".
func circuitsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, circuitsUsage)
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	cmd := args[0]
	fs := flag.NewFlagSet("brokerguard circuits "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", os.Getenv("BROKERGUARD_ADMIN_URL"), "the admin handler's base URL, e.g. http://svc:8080/admin (env BROKERGUARD_ADMIN_URL)")
	token := fs.String("token", os.Getenv("BROKERGUARD_ADMIN_TOKEN"), "bearer token for mutations (env BROKERGUARD_ADMIN_TOKEN)")
	asJSON := fs.Bool("json", false, "print the service's JSON instead of a table")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the service")
	var holdFor time.Duration
	var until, reason string
	mutating := cmd == "force-open" || cmd == "force-close" || cmd == "clear"
	if cmd == "force-open" || cmd == "force-close" {
		fs.DurationVar(&holdFor, "for", 0, "hold for this long, e.g. 10m")
		fs.StringVar(&until, "until", "", "hold until this RFC 3339 time")
		fs.StringVar(&reason, "reason", "", "why, for the audit log")
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
	if *base == "" {
		fmt.Fprintln(stderr, "brokerguard circuits: --url (or BROKERGUARD_ADMIN_URL) is required")
		return errUsage
	}
	c := adminClient{base: strings.TrimSuffix(*base, "/"), token: *token, http: &http.Client{Timeout: *timeout}}
	var path, method string
	var body []byte
	switch cmd {
	case "list":
		method, path = http.MethodGet, "/api/circuits"
	case "show":
		method, path = http.MethodGet, "/api/circuits/"+url.PathEscape(pos[0])
	default:
		method, path = http.MethodPost, "/api/circuits/"+url.PathEscape(pos[0])+"/"+cmd
		if cmd != "clear" {
			if (holdFor == 0) == (until == "") {
				fmt.Fprintln(stderr, "brokerguard circuits "+cmd+": give --for or --until (one of them)")
				return errUsage
			}
			req := map[string]string{"reason": reason}
			if holdFor != 0 {
				req["for"] = holdFor.String()
			} else {
				req["until"] = until
			}
			body, _ = json.Marshal(req)
		}
	}
	if mutating && c.token == "" {
		fmt.Fprintln(stderr, "brokerguard circuits "+cmd+": --token (or BROKERGUARD_ADMIN_TOKEN) is required")
		return errUsage
	}
	raw, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := stdout.Write(raw)
		return err
	}
	var list admin.Circuits
	if cmd == "list" {
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("the service's answer is not a circuit list: %w", err)
		}
	} else {
		var one admin.Circuit
		if err := json.Unmarshal(raw, &one); err != nil {
			return fmt.Errorf("the service's answer is not a circuit: %w", err)
		}
		list.Circuits = []admin.Circuit{one}
	}
	return printCircuits(stdout, list.Circuits)
}

func printCircuits(w io.Writer, cs []admin.Circuit) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESTINATION\tSTATE\tFAILURES\tNOT BEFORE\tOVERRIDE\tUNTIL\tMODE\tSCOPE")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", c.Destination, c.State, c.Failures,
			fmtTime(c.NotBefore), c.Override, fmtTime(c.OverrideUntil), c.Mode, c.Scope)
	}
	return tw.Flush()
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
