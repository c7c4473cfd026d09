package main

import (
	"go/format"
	"os"
	"slices"
	"strings"
	"testing"
)

const sample = `package p

const limit = 1 + 2 // not mutated: no coverage tells whether a test reads it

func f(a, b int, ok bool) bool {
	n := a + b
	n++
	n -= 2
	s := "x" + "y"
	_ = s
	g(n)
	if a < b && !ok {
		return true
	}
	return a == b
}

func g(int) {}
`

func TestSitesAndApply(t *testing.T) {
	ms, err := Sites("p.go", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Op+" "+m.Orig+">"+m.Repl)
		// Every mutant but a removal keeps the file parseable and gofmt-able.
		if _, err := format.Source(Apply([]byte(sample), m)); err != nil {
			t.Errorf("%v does not parse: %v", m, err)
		}
	}
	want := []string{
		"arithmetic +>-",
		"remove n++>", "incdec ++>--",
		"remove n -= 2>", "incdec -=>+=",
		"remove _ = s>",
		"remove g(n)>",
		"boundary <><=", "negation <>>=",
		"logical &&>||",
		"not !>",
		"bool true>false",
		"negation ==>!=",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sites:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, m := range ms {
		if m.Op == "logical" {
			out := string(Apply([]byte(sample), m))
			if !strings.Contains(out, "if a < b || !ok {") {
				t.Errorf("logical mutant applied as:\n%s", out)
			}
			if m.Line != 12 || m.Col != 11 {
				t.Errorf("logical mutant at %d:%d, want 12:11", m.Line, m.Col)
			}
		}
	}
}

func TestCovered(t *testing.T) {
	bs := parseProfile([]byte("mode: set\nex.com/p/p.go:5.31,11.12 3 1\nex.com/p/p.go:12.17,14.3 1 0\n"))
	cases := []struct {
		line, col int
		want      bool
	}{
		{6, 4, true},    // inside a block that ran
		{11, 12, false}, // the block's end is exclusive
		{13, 3, false},  // inside a block that never ran
		{20, 1, false},  // in no block
	}
	for _, c := range cases {
		if got := covered(bs, "ex.com/p/p.go", c.line, c.col); got != c.want {
			t.Errorf("covered(%d:%d) = %v, want %v", c.line, c.col, got, c.want)
		}
	}
	if covered(bs, "ex.com/p/q.go", 6, 4) {
		t.Error("a block of another file counts")
	}
}

// A case expression is in no cover block: its coverage is read at its switch.
func TestCaseExpressionsAreAnchoredAtTheirSwitch(t *testing.T) {
	src := "package p\n\nfunc f(a int) int {\n\tswitch {\n\tcase a > 1:\n\t\treturn 1\n\t}\n\treturn 0\n}\n"
	ms, err := Sites("p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Line != 5 || ms[0].AnchorLine != 4 || ms[0].AnchorCol != 2 {
		t.Fatalf("mutants %+v; want two at line 5 anchored at 4:2", ms)
	}
}

// A run's printed log resumes as its -json file would, matched across checkouts by
// file name, position and change.
func TestResumeFromALogOfAnotherCheckout(t *testing.T) {
	ms, err := Sites("/elsewhere/p.go", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	statuses := []string{"KILLED", "SURVIVED", "TIMED OUT", "INVALID", "NOT COVERED"}
	for i, m := range ms[:len(statuses)] {
		m.Status = statuses[i]
		log.WriteString(m.String() + "\n")
	}
	log.WriteString("\nsome summary line\n")
	path := t.TempDir() + "/run.log"
	if err := os.WriteFile(path, []byte(log.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	here, _ := Sites("/here/p.go", []byte(sample))
	reached := make([]int, len(here))
	for i := range here {
		reached[i] = i
	}
	again, never, err := resumeFrom(path, here, reached)
	if err != nil {
		t.Fatal(err)
	}
	if here[0].Status != "KILLED" || here[2].Status != "TIMED OUT" || here[3].Status != "INVALID" {
		t.Errorf("kept statuses %q %q %q", here[0].Status, here[2].Status, here[3].Status)
	}
	if !slices.Equal(again, []int{1, 4}) {
		t.Errorf("run again %v, want the survivor and the not-covered site [1 4]", again)
	}
	if want := len(here) - len(statuses); len(never) != want || never[0] != len(statuses) {
		t.Errorf("never run %v, want the %d mutants after the log's", never, want)
	}
}
