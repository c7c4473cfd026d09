package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeTerminal interprets what the live screen writes the way a terminal would: text,
// newlines, carriage returns, "ESC [ n A" (cursor up) and "ESC [ J" (erase below). Any
// other escape sequence fails the test. It is safe for concurrent use.
type fakeTerminal struct {
	t        *testing.T
	mu       sync.Mutex
	rows     []string
	row, col int
	raw      strings.Builder
}

var csi = regexp.MustCompile(`^\x1b\[(\d*)([A-Za-z])`)

func (f *fakeTerminal) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.raw.Write(p)
	s := string(p)
	for len(s) > 0 {
		if m := csi.FindStringSubmatch(s); m != nil {
			n, _ := strconv.Atoi(m[1])
			switch m[2] {
			case "A":
				if n > f.row {
					f.t.Errorf("cursor up %d from row %d: above the first line", n, f.row)
				}
				f.row = max(f.row-n, 0)
			case "J":
				f.grow()
				f.rows = append(f.rows[:f.row], f.rows[f.row][:min(f.col, len(f.rows[f.row]))])
			default:
				f.t.Errorf("unexpected escape sequence %q", m[0])
			}
			s = s[len(m[0]):]
			continue
		}
		switch c := s[0]; c {
		case '\n': // the terminal's output processing turns it into CR LF
			f.row, f.col = f.row+1, 0
		case '\r':
			f.col = 0
		case 0x1b:
			f.t.Errorf("malformed escape sequence in %q", s)
		default:
			f.grow()
			line := f.rows[f.row]
			line += strings.Repeat(" ", max(f.col-len(line), 0))
			f.rows[f.row] = line[:f.col] + string(c) + line[min(f.col+1, len(line)):]
			f.col++
		}
		s = s[1:]
	}
	return len(p), nil
}

// grow makes the cursor's row exist.
func (f *fakeTerminal) grow() {
	for len(f.rows) <= f.row {
		f.rows = append(f.rows, "")
	}
}

// screen returns the lines on the screen, the cursor's empty last line left out.
func (f *fakeTerminal) screen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	rows := f.rows
	if n := len(rows); n > 0 && rows[n-1] == "" {
		rows = rows[:n-1]
	}
	return rows
}

func TestScreenLiveRedrawsTheTableInPlace(t *testing.T) {
	term := &fakeTerminal{t: t}
	s := newScreen(term, true)
	s.update([]string{"transition 1"}, "T1 a\nT1 b\nT1 c\n")
	s.Write([]byte("outage\n"))
	s.update([]string{"transition 2", "transition 3"}, "T2 a\nT2 b\n") // a shorter table
	s.update(nil, "T3 a\nT3 b\nT3 c\n")
	s.keep()
	s.Write([]byte("summary\n"))

	want := []string{"transition 1", "outage", "transition 2", "transition 3", "T3 a", "T3 b", "T3 c", "summary"}
	if got := term.screen(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("screen:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Each redraw moves up exactly the lines the table on the screen took.
	raw := term.raw.String()
	var seqs []string
	for _, m := range regexp.MustCompile(`\x1b\[(\d*)([A-Za-z])`).FindAllStringSubmatch(raw, -1) {
		seqs = append(seqs, m[1]+m[2])
	}
	if got := strings.Join(seqs, " "); got != "3A J 3A J 2A J" {
		t.Fatalf("escape sequences %q, want cursor up 3, 3, 2 lines, each followed by erase below", got)
	}
	if strings.Count(raw, "summary") != 1 || strings.HasSuffix(raw, "T3 c\n") {
		t.Fatalf("after keep, output went through the redraw: %q", raw)
	}
}

func TestScreenPlainPrintsEveryTable(t *testing.T) {
	var out strings.Builder
	s := newScreen(&out, false)
	s.update([]string{"transition 1"}, "T1\n")
	s.Write([]byte("outage\n"))
	s.update(nil, "T2\n")
	if got, want := out.String(), "transition 1\nT1\noutage\nT2\n"; got != want {
		t.Fatalf("plain output %q, want %q", got, want)
	}
}

func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, w := range map[string]io.Writer{"a pipe": w, "a file": f, "a strings.Builder": &strings.Builder{}} {
		if isTerminal(w) {
			t.Errorf("%s taken for a terminal", name)
		}
	}
}
