// Command vulndb lets govulncheck run without a network: it turns the OSV reports that
// the golang.org/x/vulndb module ships (data/osv, fetched like any module through the
// module proxy) into the file database govulncheck reads with -db file://DIR, and it
// judges govulncheck's JSON output.
//
//	vulndb index OSV_DIR OUT_DIR   write OUT_DIR/index/{db,modules,vulns}.json and OUT_DIR/ID/*.json
//	vulndb report < findings.json  summarise; exit 1 when our code calls a vulnerable module
//
// Findings in the standard library are reported but do not fail the run: they belong to
// the Go toolchain that builds the code, which the machine provides and a user chooses.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 4 && os.Args[1] == "index":
		err = index(os.Args[2], os.Args[3])
	case len(os.Args) == 2 && os.Args[1] == "report":
		var failed bool
		failed, err = report(os.Stdin, os.Stdout)
		if err == nil && failed {
			os.Exit(1)
		}
	default:
		err = fmt.Errorf("usage: vulndb index OSV_DIR OUT_DIR | vulndb report < govulncheck.json")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(2)
	}
}

// osvEntry is the part of an OSV report the index needs.
type osvEntry struct {
	ID       string   `json:"id"`
	Modified string   `json:"modified"`
	Aliases  []string `json:"aliases,omitempty"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
		Ranges []struct {
			Type   string              `json:"type"`
			Events []map[string]string `json:"events"`
		} `json:"ranges"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string `json:"id"`
	Modified string `json:"modified"`
	Fixed    string `json:"fixed,omitempty"`
}

type moduleIndex struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

type vulnIndex struct {
	ID       string   `json:"id"`
	Modified string   `json:"modified"`
	Aliases  []string `json:"aliases,omitempty"`
}

// index writes the database layout govulncheck's file source expects.
func index(osvDir, out string) error {
	files, err := filepath.Glob(filepath.Join(osvDir, "*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no OSV reports in %s", osvDir)
	}
	for _, d := range []string{"index", "ID"} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return err
		}
	}
	modules := map[string][]moduleVuln{}
	var vulns []vulnIndex
	newest := ""
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var e osvEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if e.ID == "" {
			return fmt.Errorf("%s: report without an id", f)
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), raw, 0o644); err != nil {
			return err
		}
		vulns = append(vulns, vulnIndex{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		newest = max(newest, e.Modified)
		for _, a := range e.Affected {
			mv := moduleVuln{ID: e.ID, Modified: e.Modified}
			for _, r := range a.Ranges {
				if r.Type != "SEMVER" {
					continue
				}
				for _, ev := range r.Events {
					if v, ok := ev["fixed"]; ok {
						mv.Fixed = v // the last fixed event of the range
					}
				}
			}
			modules[a.Package.Name] = append(modules[a.Package.Name], mv)
		}
	}
	var mods []moduleIndex
	for p, v := range modules {
		mods = append(mods, moduleIndex{Path: p, Vulns: v})
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	sort.Slice(vulns, func(i, j int) bool { return vulns[i].ID < vulns[j].ID })
	if newest == "" {
		newest = "0001-01-01T00:00:00Z"
	}
	for name, v := range map[string]any{
		"db.json":      map[string]string{"modified": newest},
		"modules.json": mods,
		"vulns.json":   vulns,
	} {
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "index", name), raw, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// finding is the part of a govulncheck JSON finding the report needs.
type finding struct {
	OSV          string `json:"osv"`
	FixedVersion string `json:"fixed_version"`
	Trace        []struct {
		Module   string `json:"module"`
		Version  string `json:"version"`
		Function string `json:"function"`
	} `json:"trace"`
}

// report reads govulncheck -format json from r and writes one line per vulnerability
// that our code reaches (a trace down to a function). It says failed when one of them
// is in a module rather than the standard library.
func report(r io.Reader, w io.Writer) (failed bool, err error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	called := map[string]string{} // osv id -> line
	stdlib := map[string]bool{}
	for {
		var msg struct {
			Finding *finding `json:"finding"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			return false, fmt.Errorf("reading govulncheck output: %w", err)
		}
		f := msg.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue // imported or required but not called
		}
		top := f.Trace[0]
		if top.Module == "stdlib" || top.Module == "toolchain" {
			stdlib[f.OSV] = true
			continue
		}
		called[f.OSV] = fmt.Sprintf("%s: %s@%s is called; fixed in %s", f.OSV, top.Module, top.Version, f.FixedVersion)
		failed = true
	}
	ids := make([]string, 0, len(called))
	for id := range called {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintln(w, called[id])
	}
	if len(stdlib) > 0 {
		list := make([]string, 0, len(stdlib))
		for id := range stdlib {
			list = append(list, id)
		}
		sort.Strings(list)
		fmt.Fprintf(w, "note: the Go toolchain building this has %d known vulnerabilities our code reaches (%s); build releases with a patched Go\n",
			len(list), strings.Join(list, " "))
	}
	if !failed {
		fmt.Fprintln(w, "no vulnerable module is called")
	}
	return failed, nil
}
