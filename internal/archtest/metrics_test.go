package archtest

import (
	"fmt"
	"sort"
	"testing"
)

// figures are an offender's figures when it was put on the allowlist: its exported
// names (for a package), or its lines and complexity (for a function).
type figures struct{ exported, lines, complexity int }

// overBound lists the packages and functions that were over their bounds when the
// bounds were set, with their figures then. It may only shrink: the test fails when an
// entry is no longer over its bound (delete the entry), when one has grown past its
// figures, and when a package or function not listed here passes a bound. Packages are
// keyed by directory, functions by directory and name ("Recv.Name" for a method).
var overBound = map[string]figures{
	// The circuit, the limiter, budgets, ramps and backend plumbing in one package;
	// its bound is NewMaxExported.
	"breaker": {exported: 85},
	// The processor, its options and its store contract in one package.
	"outbox": {exported: 127},

	// The partitioned call path, beside the unpartitioned one.
	"registry Registry.CallPartitioned": {lines: 148, complexity: 47},
}

// The size bounds of packages and functions, across the root module and the nested
// ones (non-test code only): exported names per package (ExportedBound), and lines
// (MaxFuncLines) and cyclomatic complexity (MaxComplexity) per function.
func TestSizeBounds(t *testing.T) {
	pkgs, err := Measure("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		bound := ExportedBound(p.Dir)
		checkFigure(t, seen, p.Dir, "exported names", p.Exported, bound, overBound[p.Dir].exported)
		for _, f := range p.Funcs {
			key := p.Dir + " " + f.Name
			where := fmt.Sprintf("%s (%s:%d)", key, f.File, f.Line)
			allowed := overBound[key]
			over := f.Lines > MaxFuncLines || f.Complexity > MaxComplexity
			if !over {
				if _, listed := overBound[key]; listed && !seen[key] {
					t.Errorf("%s: %d lines, cyclomatic %d, within the bounds now: delete it from overBound", where, f.Lines, f.Complexity)
				}
				seen[key] = true
				continue
			}
			seen[key] = true
			if _, listed := overBound[key]; !listed {
				t.Errorf("%s: %d lines, cyclomatic %d; the bounds are %d lines and cyclomatic %d: split it",
					where, f.Lines, f.Complexity, MaxFuncLines, MaxComplexity)
			} else if f.Lines > max(allowed.lines, MaxFuncLines) || f.Complexity > max(allowed.complexity, MaxComplexity) {
				t.Errorf("%s: %d lines, cyclomatic %d, grown past its %d lines and cyclomatic %d in overBound: make it smaller, not larger",
					where, f.Lines, f.Complexity, allowed.lines, allowed.complexity)
			}
		}
	}
	var gone []string
	for key := range overBound {
		if !seen[key] {
			gone = append(gone, key)
		}
	}
	sort.Strings(gone)
	for _, key := range gone {
		t.Errorf("%s is in overBound but no longer exists: delete the entry", key)
	}
}

// checkFigure checks a package's exported names against its bound and the allowlist.
func checkFigure(t *testing.T, seen map[string]bool, key, what string, got, bound, allowed int) {
	t.Helper()
	seen[key] = true
	_, listed := overBound[key]
	switch {
	case got <= bound && listed:
		t.Errorf("%s: %d %s, within its bound of %d now: delete it from overBound", key, got, what, bound)
	case got > bound && !listed:
		t.Errorf("%s: %d %s, over its bound of %d: make the package smaller or split it", key, got, what, bound)
	case got > bound && got > allowed:
		t.Errorf("%s: %d %s, grown past its %d in overBound (bound %d): make it smaller, not larger", key, got, what, allowed, bound)
	}
}

// Measure's figures on a file whose figures are counted by hand.
func TestMeasureCountsAsDocumented(t *testing.T) {
	pkgs, err := Measure("testdata/sample")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 {
		t.Fatalf("Measure found %d packages; want 1", len(pkgs))
	}
	p := pkgs[0]
	if p.Dir != "." || p.Exported != 7 || p.TestFiles != 1 {
		t.Errorf("package %q: %d exported, %d test files; want \".\", 7, 1", p.Dir, p.Exported, p.TestFiles)
	}
	got := map[string]Func{}
	for _, f := range p.Funcs {
		got[f.Name] = f
	}
	if f := got["F"]; f.Complexity != 9 || f.Lines != 23 || f.File != "sample.go" {
		t.Errorf("F: %+v; want complexity 9, 23 lines, in sample.go", f)
	}
	for _, name := range []string{"T.M", "t.m"} {
		if f, ok := got[name]; !ok || f.Complexity != 1 || f.Lines != 1 {
			t.Errorf("%s: %+v (found %v); want complexity 1, one line", name, f, ok)
		}
	}
}

// The bounds themselves: breaker and new packages get the narrower one.
func TestExportedBound(t *testing.T) {
	for dir, want := range map[string]int{"breaker": NewMaxExported, "admission": NewMaxExported, "outbox": MaxExported, "registry": MaxExported} {
		if got := ExportedBound(dir); got != want {
			t.Errorf("ExportedBound(%q) = %d; want %d", dir, got, want)
		}
	}
}
