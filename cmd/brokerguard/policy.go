package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/brokerguard/brokerguard/admin"
)

const policyUsage = `usage: brokerguard policy COMMAND [flags] [ARG]

Commands:
  show                      the policy set in force: its version, author, reason,
                            fingerprint, expiry, and the set itself (JSON)
  history                   the versions the service keeps, newest first
  dry-run FILE              what putting the set in FILE in force would do, per
                            destination and field, and which live circuits it would
                            close, open on their next failure, or restart the counts of
  apply FILE                put the set in FILE in force as the next version:
                            --reason R (required), --author A (default $USER),
                            --expires-in 1h to revert by itself after that long
  rollback VERSION          put an earlier version's set back in force as the next
                            version: --reason R, --author A

FILE is a policy set as "show --json" prints it under "set" ("-" reads standard
input). Every circuit keeps its state; see docs/policies.md for what restarts.

  --url URL                 the service's admin handler; env BROKERGUARD_ADMIN_URL
  --token TOKEN             its mutation token (dry-run, apply, rollback); env
                            BROKERGUARD_ADMIN_TOKEN
  --json                    print the service's JSON

Exit codes: 0 done, 1 the service failed or could not be reached, 2 usage,
4 refused (mutations disabled, wrong token, invalid set, a version not kept).
`

// policyOpts is what the flags and arguments of a policy command say.
type policyOpts struct {
	cmd, base, token, reason, author string
	asJSON                           bool
	timeout, expires                 time.Duration
	arg                              string // FILE or VERSION
}

// policyCmd runs "brokerguard policy ...".
func policyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := askedForHelp(args, policyUsage, stderr); err != nil {
		return err
	}
	o, err := parsePolicyFlags(args, stderr)
	if err != nil {
		return err
	}
	c := adminClient{base: strings.TrimSuffix(o.base, "/"), token: o.token, http: &http.Client{Timeout: o.timeout}}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.cmd == "show" || o.cmd == "history" {
		return policyRead(ctx, c, o, stdout)
	}
	body, err := policyBody(o, stderr)
	if err != nil {
		return err
	}
	return policyChange(ctx, c, o, body, stdout)
}

// parsePolicyFlags reads the command, its flags (or their environment variables) and
// its argument, and checks that what the command needs is there.
func parsePolicyFlags(args []string, stderr io.Writer) (policyOpts, error) {
	o := policyOpts{cmd: args[0]}
	fs := flag.NewFlagSet("brokerguard policy "+o.cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.base, "url", "", "the admin handler's base URL (env BROKERGUARD_ADMIN_URL)")
	fs.StringVar(&o.token, "token", "", "the mutation token (env BROKERGUARD_ADMIN_TOKEN)")
	fs.BoolVar(&o.asJSON, "json", false, "print the service's JSON")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long the command may take")
	fs.StringVar(&o.reason, "reason", "", "apply, rollback: why, for the audit log (required)")
	fs.StringVar(&o.author, "author", os.Getenv("USER"), "apply, rollback: who (default $USER)")
	fs.DurationVar(&o.expires, "expires-in", 0, "apply: revert by itself after this long, e.g. 1h")
	n, ok := map[string]int{"show": 0, "history": 0, "dry-run": 1, "apply": 1, "rollback": 1}[o.cmd]
	if !ok {
		fmt.Fprintf(stderr, "brokerguard policy: unknown command %q\n\n%s", o.cmd, policyUsage)
		return o, errUsage
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return o, err
	}
	if len(pos) != n {
		fmt.Fprintf(stderr, "brokerguard policy %s: want %d argument(s), got %d\n", o.cmd, n, len(pos))
		return o, errUsage
	}
	if n > 0 {
		o.arg = pos[0]
	}
	// Read after parsing, not as flag defaults: the usage would print the token.
	if o.base == "" {
		o.base = os.Getenv("BROKERGUARD_ADMIN_URL")
	}
	if o.token == "" {
		o.token = os.Getenv("BROKERGUARD_ADMIN_TOKEN")
	}
	change := o.cmd == "apply" || o.cmd == "rollback"
	var missing string
	switch {
	case o.base == "":
		missing = "--url (or BROKERGUARD_ADMIN_URL) is required"
	case n > 0 && o.token == "":
		missing = "--token (or BROKERGUARD_ADMIN_TOKEN) is required"
	case change && o.reason == "":
		missing = "--reason is required"
	case change && o.author == "":
		missing = "--author is required ($USER is not set)"
	default:
		return o, nil
	}
	fmt.Fprintln(stderr, "brokerguard policy "+o.cmd+": "+missing)
	return o, errUsage
}

// policyRead runs show and history.
func policyRead(ctx context.Context, c adminClient, o policyOpts, stdout io.Writer) error {
	raw, err := c.do(ctx, http.MethodGet, "/api/policies", nil)
	if err != nil {
		return err
	}
	var p admin.Policies
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("the service's answer is not a policy set: %w", err)
	}
	switch {
	case o.asJSON:
		return printJSON(stdout, p)
	case o.cmd == "history":
		return printPolicyHistory(stdout, p)
	}
	printPolicyVersion(stdout, p)
	return printJSON(stdout, p.Active.Set)
}

// policyBody is the request of dry-run, apply or rollback.
func policyBody(o policyOpts, stderr io.Writer) (map[string]any, error) {
	if o.cmd == "rollback" {
		v, err := strconv.ParseUint(o.arg, 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "brokerguard policy rollback: VERSION %q is not a version number\n", o.arg)
			return nil, errUsage
		}
		return map[string]any{"version": v, "author": o.author, "reason": o.reason}, nil
	}
	set, err := readSetFile(o.arg)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	body := map[string]any{"set": set}
	if o.cmd == "apply" {
		body["author"], body["reason"] = o.author, o.reason
		if o.expires > 0 {
			body["expires_in"] = o.expires.String()
		}
	}
	return body, nil
}

// policyChange sends a dry-run, apply or rollback and prints the answer.
func policyChange(ctx context.Context, c adminClient, o policyOpts, body map[string]any, stdout io.Writer) error {
	req, _ := json.Marshal(body)
	raw, err := c.do(ctx, http.MethodPost, "/api/policies/"+o.cmd, req)
	if err != nil {
		return err
	}
	var res admin.PolicyResult
	if o.cmd == "dry-run" {
		err = json.Unmarshal(raw, &res.Plan)
	} else {
		err = json.Unmarshal(raw, &res)
	}
	if err != nil {
		return fmt.Errorf("the service's answer is not a policy change: %w", err)
	}
	switch {
	case o.asJSON && o.cmd == "dry-run":
		return printJSON(stdout, res.Plan)
	case o.asJSON:
		return printJSON(stdout, res)
	case o.cmd != "dry-run":
		printPolicyVersion(stdout, admin.Policies{Active: res.Version})
	}
	return printPlan(stdout, res.Plan)
}

// readSetFile reads a policy set's JSON from path ("-": standard input). The
// service validates it; here it must only be JSON.
func readSetFile(path string) (json.RawMessage, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("policy set: %w", err)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("policy set %s: not JSON", path)
	}
	return b, nil
}

func printPolicyVersion(w io.Writer, p admin.Policies) {
	v := p.Active
	fmt.Fprintf(w, "version %d  fingerprint %s  applied %s by %s: %s\n", v.Version, esc(v.Fingerprint),
		v.At.UTC().Format(time.RFC3339), esc(v.Author), esc(v.Reason))
	if !v.Expires.IsZero() {
		fmt.Fprintf(w, "expires %s, back to version %d's set\n", v.Expires.UTC().Format(time.RFC3339), v.Reverts)
	}
}

func printPolicyHistory(w io.Writer, p admin.Policies) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tAPPLIED\tAUTHOR\tFINGERPRINT\tEXPIRES\tREASON")
	for _, v := range p.History {
		exp := "-"
		if !v.Expires.IsZero() {
			exp = v.Expires.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", v.Version, v.At.UTC().Format(time.RFC3339), esc(v.Author), esc(v.Fingerprint), exp, esc(v.Reason))
	}
	return tw.Flush()
}

// printPlan prints a plan: the default's fields, then one line per changed field of
// each destination, with what the change does to its live circuit.
func printPlan(w io.Writer, p admin.PolicyPlan) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "version %d -> %d\n", p.From, p.To)
	fmt.Fprintln(tw, "DESTINATION\tFIELD\tFROM\tTO\tCIRCUIT")
	for _, f := range p.Default {
		fmt.Fprintf(tw, "(default)\t%s\t%s\t%s\t\n", esc(f.Field), esc(f.From), esc(f.To))
	}
	for _, d := range p.Destinations {
		effect := planEffect(d)
		for i, f := range d.Fields {
			if i > 0 {
				effect = ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", esc(d.Destination), esc(f.Field), esc(f.From), esc(f.To), effect)
		}
	}
	return tw.Flush()
}

// planEffect says in words what a plan does to a destination's live circuit.
func planEffect(d admin.PolicyPlanRow) string {
	if !d.Live {
		return "no live circuit"
	}
	var out []string
	for _, e := range []struct {
		on   bool
		text string
	}{{d.Closes, "closes now"}, {d.OpensOnNextFailure, "opens on next failure"}, {d.RestartsCounts, "counts restart"},
		{d.RestartsSlowCalls && !d.RestartsCounts, "slow-call counts restart"}, {d.RestartsAdmission, "admission restarts"}} {
		if e.on {
			out = append(out, e.text)
		}
	}
	if len(out) == 0 {
		return d.State + ", state kept"
	}
	return d.State + ": " + strings.Join(out, ", ")
}
