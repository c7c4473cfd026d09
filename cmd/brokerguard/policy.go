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

// policyCmd runs "brokerguard policy ...".
func policyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := askedForHelp(args, policyUsage, stderr); err != nil {
		return err
	}
	cmd := args[0]
	fs := flag.NewFlagSet("brokerguard policy "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", "", "the admin handler's base URL (env BROKERGUARD_ADMIN_URL)")
	token := fs.String("token", "", "the mutation token (env BROKERGUARD_ADMIN_TOKEN)")
	asJSON := fs.Bool("json", false, "print the service's JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "how long the command may take")
	reason := fs.String("reason", "", "apply, rollback: why, for the audit log (required)")
	author := fs.String("author", os.Getenv("USER"), "apply, rollback: who (default $USER)")
	expires := fs.Duration("expires-in", 0, "apply: revert by itself after this long, e.g. 1h")
	wantArgs := map[string]int{"show": 0, "history": 0, "dry-run": 1, "apply": 1, "rollback": 1}
	n, ok := wantArgs[cmd]
	if !ok {
		fmt.Fprintf(stderr, "brokerguard policy: unknown command %q\n\n%s", cmd, policyUsage)
		return errUsage
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != n {
		fmt.Fprintf(stderr, "brokerguard policy %s: want %d argument(s), got %d\n", cmd, n, len(pos))
		return errUsage
	}
	if *base == "" {
		*base = os.Getenv("BROKERGUARD_ADMIN_URL")
	}
	if *token == "" {
		*token = os.Getenv("BROKERGUARD_ADMIN_TOKEN")
	}
	switch {
	case *base == "":
		fmt.Fprintln(stderr, "brokerguard policy "+cmd+": --url (or BROKERGUARD_ADMIN_URL) is required")
		return errUsage
	case n > 0 && *token == "":
		fmt.Fprintln(stderr, "brokerguard policy "+cmd+": --token (or BROKERGUARD_ADMIN_TOKEN) is required")
		return errUsage
	case (cmd == "apply" || cmd == "rollback") && *reason == "":
		fmt.Fprintln(stderr, "brokerguard policy "+cmd+": --reason is required")
		return errUsage
	case (cmd == "apply" || cmd == "rollback") && *author == "":
		fmt.Fprintln(stderr, "brokerguard policy "+cmd+": --author is required ($USER is not set)")
		return errUsage
	}
	c := adminClient{base: strings.TrimSuffix(*base, "/"), token: *token, http: &http.Client{Timeout: *timeout}}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	var body map[string]any
	switch cmd {
	case "show", "history":
		raw, err := c.do(ctx, http.MethodGet, "/api/policies", nil)
		if err != nil {
			return err
		}
		var p admin.Policies
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("the service's answer is not a policy set: %w", err)
		}
		if *asJSON {
			return printJSON(stdout, p)
		}
		if cmd == "history" {
			return printPolicyHistory(stdout, p)
		}
		printPolicyVersion(stdout, p)
		return printJSON(stdout, p.Active.Set)
	case "dry-run", "apply":
		set, err := readSetFile(pos[0])
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		body = map[string]any{"set": set}
		if cmd == "apply" {
			body["author"], body["reason"] = *author, *reason
			if *expires > 0 {
				body["expires_in"] = expires.String()
			}
		}
	case "rollback":
		v, err := strconv.ParseUint(pos[0], 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "brokerguard policy rollback: VERSION %q is not a version number\n", pos[0])
			return errUsage
		}
		body = map[string]any{"version": v, "author": *author, "reason": *reason}
	}
	req, _ := json.Marshal(body)
	raw, err := c.do(ctx, http.MethodPost, "/api/policies/"+cmd, req)
	if err != nil {
		return err
	}
	var res admin.PolicyResult
	if cmd == "dry-run" {
		err = json.Unmarshal(raw, &res.Plan)
	} else {
		err = json.Unmarshal(raw, &res)
	}
	if err != nil {
		return fmt.Errorf("the service's answer is not a policy change: %w", err)
	}
	if *asJSON {
		if cmd == "dry-run" {
			return printJSON(stdout, res.Plan)
		}
		return printJSON(stdout, res)
	}
	if cmd != "dry-run" {
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
