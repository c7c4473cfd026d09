// Command ratios reads `go test -bench` output on standard input and prints the
// benchmark table with ratios against brokerguard, measured in the same run, and
// whether each performance target of the project holds. It exits 1 when one does not.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// result is the median of one benchmark's runs.
type result struct {
	nsPerOp float64
	allocs  float64
}

// key names a benchmark: its case ("Closed"), implementation ("gobreaker") and GOMAXPROCS.
type key struct {
	group, impl string
	cpu         int
}

// parse reads benchmark lines and returns the median ns/op and allocs/op per key.
func parse(r io.Reader) (map[key]result, []key) {
	samples := map[key][][2]float64{}
	var order []key
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		name, cpu := f[0], 1
		if i := strings.LastIndex(name, "-"); i > 0 {
			if n, err := strconv.Atoi(name[i+1:]); err == nil {
				name, cpu = name[:i], n
			}
		}
		group, impl, _ := strings.Cut(strings.TrimPrefix(name, "Benchmark"), "/")
		ns, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		allocs := -1.0
		for i := 4; i+1 < len(f); i++ {
			if f[i+1] == "allocs/op" {
				allocs, _ = strconv.ParseFloat(f[i], 64)
			}
		}
		k := key{group, impl, cpu}
		if _, seen := samples[k]; !seen {
			order = append(order, k)
		}
		samples[k] = append(samples[k], [2]float64{ns, allocs})
	}
	out := map[key]result{}
	for k, s := range samples {
		slices.SortFunc(s, func(a, b [2]float64) int { return int(a[0]*1000 - b[0]*1000) })
		m := s[len(s)/2]
		out[k] = result{nsPerOp: m[0], allocs: m[1]}
	}
	return out, order
}

// target is one of the project's performance promises.
type target struct {
	what  string
	check func(get func(group, impl string) (result, bool)) (value string, ok, known bool)
}

func ratio(group, num, den string, limit float64, atLeast bool) func(func(string, string) (result, bool)) (string, bool, bool) {
	return func(get func(string, string) (result, bool)) (string, bool, bool) {
		n, ok1 := get(group, num)
		d, ok2 := get(group, den)
		if !ok1 || !ok2 {
			return "", false, false
		}
		r := n.nsPerOp / d.nsPerOp
		if atLeast {
			return fmt.Sprintf("%.2fx", r), r >= limit, true
		}
		return fmt.Sprintf("%.2fx", r), r <= limit, true
	}
}

func zeroAllocs(group, impl string) func(func(string, string) (result, bool)) (string, bool, bool) {
	return func(get func(string, string) (result, bool)) (string, bool, bool) {
		r, ok := get(group, impl)
		if !ok {
			return "", false, false
		}
		return fmt.Sprintf("%.0f allocs/op", r.allocs), r.allocs == 0, true
	}
}

var targets = []target{
	{"closed path allocates nothing", zeroAllocs("Closed", "brokerguard")},
	{"open rejection allocates nothing", zeroAllocs("Open", "brokerguard")},
	{"ramping admission allocates nothing", zeroAllocs("Closed", "ramping")},
	{"ramp refusal allocates nothing", zeroAllocs("Open", "ramping")},
	{"closed path: gobreaker/ours >= 5", ratio("Closed", "gobreaker", "brokerguard", 5, true)},
	{"closed path: failsafe/ours > 1", ratio("Closed", "failsafe", "brokerguard", 1.0001, true)},
	{"closed path: ours/atomic floor <= 10", ratio("Closed", "brokerguard", "atomic-floor", 10, false)},
	{"open rejection: ours/failsafe <= 0.6", ratio("Open", "brokerguard", "failsafe", 0.6, false)},
	// Ramping admission pays one clock read over the closed path, and no lock.
	{"ramping admission: ramping/closed <= 8", ratio("Closed", "ramping", "brokerguard", 8, false)},
}

func report(w io.Writer, results map[key]result, order []key) (missed int) {
	fmt.Fprintf(w, "\n%-8s %-4s %-14s %10s %10s %14s\n", "case", "cpu", "implementation", "ns/op", "allocs/op", "vs brokerguard")
	for _, k := range order {
		r := results[k]
		vs := "-"
		if base, ok := results[key{k.group, "brokerguard", k.cpu}]; ok && k.impl != "brokerguard" {
			vs = fmt.Sprintf("%.2fx", r.nsPerOp/base.nsPerOp)
		}
		fmt.Fprintf(w, "%-8s %-4d %-14s %10.2f %10.0f %14s\n", k.group, k.cpu, k.impl, r.nsPerOp, r.allocs, vs)
	}
	cpus := map[int]bool{}
	for k := range results {
		cpus[k.cpu] = true
	}
	fmt.Fprintln(w, "\ntargets (medians of this run):")
	for _, t := range targets {
		for cpu := range 64 {
			if !cpus[cpu] {
				continue
			}
			get := func(group, impl string) (result, bool) { r, ok := results[key{group, impl, cpu}]; return r, ok }
			value, ok, known := t.check(get)
			if !known {
				continue
			}
			verdict := "ok"
			if !ok {
				verdict, missed = "MISSED", missed+1
			}
			fmt.Fprintf(w, "  %-40s cpu=%d  %-16s %s\n", t.what, cpu, value, verdict)
		}
	}
	return missed
}

func main() {
	results, order := parse(os.Stdin)
	if len(results) == 0 {
		fmt.Fprintln(os.Stderr, "ratios: no benchmark lines on standard input")
		os.Exit(2)
	}
	if report(os.Stdout, results, order) > 0 {
		os.Exit(1)
	}
}
