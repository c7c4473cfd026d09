// Command mutate measures how many one-token changes to a package its tests catch
// (mutation testing), with nothing but the standard library and the go command.
//
//	go run ./internal/tools/mutate [flags] PKG_DIR [TEST_PKG...]
//
// It lists every mutation site in PKG_DIR's non-test files (operators below), runs the
// tests once with -coverprofile -coverpkg=PKG to learn which sites any test reaches, and
// then, for each reached site, builds and runs the tests with the mutated file swapped in
// by `go test -overlay` (the tree is never edited, so it is safe beside other work).
// TEST_PKG defaults to PKG_DIR; name more packages when tests elsewhere own the
// package's rules (outbox/postgres is proven by integration/outbox).
//
// A mutant is KILLED when the tests fail or time out, SURVIVED when they pass, INVALID
// when it does not compile (left out of the score), NOT COVERED when no test reaches the
// site (counted as a survivor). Score = killed / (killed + survived + not covered).
//
// Operators (gremlins' set plus statement removal):
//
//	boundary    < <=, <= <, > >=, >= >
//	negation    == !=, != ==, < >=, <= >, > <=, >= <
//	arithmetic  + -, - +, * /, / *, % *
//	incdec      ++ --, -- ++, += -=, -= +=
//	logical     && ||, || &&
//	not         !x becomes x
//	bool        true/false swapped in return statements
//	remove      a call statement, an assignment (not :=), ++/-- or a channel send deleted
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mutant is one change: the bytes [Start, End) of File become Repl.
type Mutant struct {
	ID        int
	File      string // absolute path
	Line, Col int
	// AnchorLine and AnchorCol are where coverage is read: the site itself, or for a
	// case expression (in no block of a cover profile) its switch or select statement.
	AnchorLine, AnchorCol int
	Start, End            int // byte offsets in File
	Op                    string
	Orig, Repl            string
	Status                string
	Detail                string
	Sampled               bool // chosen by -sample: its result stands for the reached mutants not run
}

func (m Mutant) String() string {
	orig := strings.Join(strings.Fields(m.Orig), " ")
	if len(orig) > 60 {
		orig = orig[:57] + "..."
	}
	return fmt.Sprintf("%-11s #%d %s:%d:%d %s %q -> %q", m.Status, m.ID, filepath.Base(m.File), m.Line, m.Col, m.Op, orig, m.Repl)
}

var swaps = map[string]map[token.Token]token.Token{
	"boundary":   {token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR},
	"negation":   {token.EQL: token.NEQ, token.NEQ: token.EQL, token.LSS: token.GEQ, token.LEQ: token.GTR, token.GTR: token.LEQ, token.GEQ: token.LSS},
	"arithmetic": {token.ADD: token.SUB, token.SUB: token.ADD, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL},
	"logical":    {token.LAND: token.LOR, token.LOR: token.LAND},
	"incdec":     {token.INC: token.DEC, token.DEC: token.INC, token.ADD_ASSIGN: token.SUB_ASSIGN, token.SUB_ASSIGN: token.ADD_ASSIGN},
}

// span is a case expression or a select's communication, with the switch or select
// statement whose coverage stands for it.
type span struct{ from, to, anchor token.Pos }

// siteFinder collects the mutants of one file.
type siteFinder struct {
	fset *token.FileSet
	path string
	src  []byte
	out  []Mutant
	// Case expressions and a select's communications lie in no cover block: they are
	// reached when their switch or select statement is.
	cases []span
}

// Sites lists the mutants of one file's source, in source order.
func Sites(path string, src []byte) ([]Mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	sf := &siteFinder{fset: fset, path: path, src: src}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue // constants and package variables: no coverage to tell whether a test reads them
		}
		ast.Inspect(fd.Body, sf.visit)
	}
	sort.SliceStable(sf.out, func(i, j int) bool { return sf.out[i].Start < sf.out[j].Start })
	return sf.out, nil
}

// visit adds the mutants of one node; it is an ast.Inspect function.
func (sf *siteFinder) visit(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.SwitchStmt:
		sf.caseSpans(n, n.Body)
	case *ast.TypeSwitchStmt:
		sf.caseSpans(n, n.Body)
	case *ast.SelectStmt:
		sf.caseSpans(n, n.Body)
	case *ast.BinaryExpr:
		if (n.Op == token.ADD || n.Op == token.SUB) && (isString(n.X) || isString(n.Y)) {
			break // string concatenation
		}
		sf.tokenSwaps(n.OpPos, n.Op)
	case *ast.IncDecStmt:
		sf.tokenSwaps(n.TokPos, n.Tok)
		sf.add("remove", n.Pos(), n.End(), "")
	case *ast.AssignStmt:
		sf.tokenSwaps(n.TokPos, n.Tok)
		if n.Tok != token.DEFINE {
			sf.add("remove", n.Pos(), n.End(), "")
		}
	case *ast.UnaryExpr:
		if n.Op == token.NOT {
			sf.add("not", n.OpPos, n.OpPos+1, "")
		}
	case *ast.ExprStmt:
		sf.callStmt(n)
	case *ast.SendStmt:
		sf.add("remove", n.Pos(), n.End(), "")
	case *ast.ReturnStmt:
		sf.boolReturns(n)
	}
	return true
}

// add records the mutant that replaces [pos, end) by repl, anchored for coverage at
// the innermost case span holding pos, if any.
func (sf *siteFinder) add(op string, pos, end token.Pos, repl string) {
	p := sf.fset.Position(pos)
	s, e := p.Offset, sf.fset.Position(end).Offset
	a := p
	for i := len(sf.cases) - 1; i >= 0; i-- {
		if pos >= sf.cases[i].from && pos < sf.cases[i].to {
			a = sf.fset.Position(sf.cases[i].anchor)
			break
		}
	}
	sf.out = append(sf.out, Mutant{File: sf.path, Line: p.Line, Col: p.Column, AnchorLine: a.Line, AnchorCol: a.Column,
		Start: s, End: e, Op: op, Orig: string(sf.src[s:e]), Repl: repl})
}

// caseSpans records the case expressions of a switch or select statement's body.
func (sf *siteFinder) caseSpans(stmt ast.Node, body *ast.BlockStmt) {
	for _, c := range body.List {
		switch c := c.(type) {
		case *ast.CaseClause:
			if len(c.List) > 0 {
				sf.cases = append(sf.cases, span{c.List[0].Pos(), c.Colon, stmt.Pos()})
			}
		case *ast.CommClause:
			if c.Comm != nil {
				sf.cases = append(sf.cases, span{c.Comm.Pos(), c.Colon, stmt.Pos()})
			}
		}
	}
}

// tokenSwaps adds a mutant per operator family that swaps tok.
func (sf *siteFinder) tokenSwaps(pos token.Pos, tok token.Token) {
	for _, op := range []string{"boundary", "negation", "arithmetic", "logical", "incdec"} {
		if to, ok := swaps[op][tok]; ok {
			sf.add(op, pos, pos+token.Pos(len(tok.String())), to.String())
		}
	}
}

// callStmt adds the removal of a call statement, unless it calls panic: a function
// may end with it.
func (sf *siteFinder) callStmt(n *ast.ExprStmt) {
	c, ok := n.X.(*ast.CallExpr)
	if !ok {
		return
	}
	if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "panic" {
		return
	}
	sf.add("remove", n.Pos(), n.End(), "")
}

// boolReturns swaps each literal true or false a return statement gives.
func (sf *siteFinder) boolReturns(n *ast.ReturnStmt) {
	for _, r := range n.Results {
		if id, ok := r.(*ast.Ident); ok && (id.Name == "true" || id.Name == "false") {
			sf.add("bool", id.Pos(), id.End(), map[string]string{"true": "false", "false": "true"}[id.Name])
		}
	}
}

func isString(e ast.Expr) bool {
	l, ok := e.(*ast.BasicLit)
	return ok && (l.Kind == token.STRING || l.Kind == token.CHAR)
}

// Apply returns src with the mutant's change made.
func Apply(src []byte, m Mutant) []byte {
	out := make([]byte, 0, len(src)+len(m.Repl))
	out = append(out, src[:m.Start]...)
	out = append(out, m.Repl...)
	return append(out, src[m.End:]...)
}

// block is one line of a cover profile.
type block struct {
	file                       string
	startL, startC, endL, endC int
	count                      int
}

var profileLine = regexp.MustCompile(`^(.+):(\d+)\.(\d+),(\d+)\.(\d+) \d+ (\d+)$`)

// parseProfile reads a -coverprofile file (any mode).
func parseProfile(data []byte) []block {
	var bs []block
	for _, m := range lineMatches(data, profileLine) {
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		bs = append(bs, block{m[1], n(2), n(3), n(4), n(5), n(6)})
	}
	return bs
}

// lineMatches returns the submatches of re in each line of data it matches.
func lineMatches(data []byte, re *regexp.Regexp) [][]string {
	var ms [][]string
	for _, l := range strings.Split(string(data), "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			ms = append(ms, m)
		}
	}
	return ms
}

// covered tells whether a test ran a block holding the position.
func covered(bs []block, importFile string, line, col int) bool {
	for _, b := range bs {
		if b.file != importFile {
			continue
		}
		after := line > b.startL || line == b.startL && col >= b.startC
		before := line < b.endL || line == b.endL && col < b.endC
		if after && before && b.count > 0 {
			return true
		}
	}
	return false
}

// config is what the command line asks for.
type config struct {
	pkgDir          string
	testPkgs        []string
	sample          int
	seed            uint64
	parallel        int
	factor          float64
	run, only       string
	list            bool
	jsonOut, resume string
}

func main() {
	var c config
	flag.IntVar(&c.sample, "sample", 0, "run a random sample of this many covered mutants (0: all)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the sample")
	flag.IntVar(&c.parallel, "parallel", 2, "mutants built and tested at once")
	flag.Float64Var(&c.factor, "timeout-factor", 10, "a mutant's tests time out at this many times the baseline run (at least 30s)")
	flag.StringVar(&c.run, "run", "", "passed to go test -run")
	flag.StringVar(&c.only, "only", "", "only mutants whose FILE:LINE (or #ID) matches this regexp")
	flag.BoolVar(&c.list, "list", false, "list the mutants and their coverage; run nothing")
	flag.StringVar(&c.jsonOut, "json", "", "also write every mutant with its status to this file")
	flag.StringVar(&c.resume, "resume", "", "an earlier run's -json file or printed log (from any checkout of the tree): keep its killed and invalid mutants, run again its survivors and the sites it found not covered; with -sample, run that many of the mutants it never ran")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: mutate [flags] PKG_DIR [TEST_PKG...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	c.pkgDir, c.testPkgs = flag.Arg(0), flag.Args()[1:]
	if err := mutate(c); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

// target is the package whose mutants are run, as go list names it.
type target struct {
	importPath, dir string
	files           []string // its non-test Go files
}

func listPackage(pkgDir string) (target, error) {
	info, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\n{{.Dir}}\n{{join .GoFiles \" \"}}", pkgDir).Output()
	if err != nil {
		return target{}, fmt.Errorf("go list %s: %w", pkgDir, err)
	}
	lines := strings.Split(strings.TrimSpace(string(info)), "\n")
	if len(lines) < 3 {
		return target{}, fmt.Errorf("go list %s: no Go files", pkgDir)
	}
	return target{importPath: lines[0], dir: lines[1], files: strings.Fields(lines[2])}, nil
}

func mutate(c config) error {
	if !strings.HasPrefix(c.pkgDir, ".") {
		c.pkgDir = "./" + c.pkgDir
	}
	if len(c.testPkgs) == 0 {
		c.testPkgs = []string{c.pkgDir}
	}
	pkg, err := listPackage(c.pkgDir)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "mutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	baseline, blocks, err := runBaseline(c, pkg, work)
	if err != nil {
		return err
	}
	all, srcs, err := collect(pkg, blocks)
	if err != nil {
		return err
	}
	var filter *regexp.Regexp
	if c.only != "" {
		if filter, err = regexp.Compile(c.only); err != nil {
			return err
		}
	}
	reached := countStatus(all, "PENDING")
	todo, err := choose(c, all, filter)
	if err != nil {
		return err
	}
	timeout := max(30*time.Second, time.Duration(c.factor*float64(baseline)))
	fmt.Printf("%s: %d mutants, %d reached by tests, %d to run; baseline %s, test timeout %s; tests: %s\n",
		pkg.importPath, len(all), reached, len(todo), baseline.Round(time.Millisecond), timeout, strings.Join(c.testPkgs, " "))
	if c.list {
		for _, m := range all {
			fmt.Println(m)
		}
		return nil
	}
	runAll(c, work, all, srcs, todo, timeout)
	return report(c, pkg.importPath, all, filter != nil)
}

// runBaseline runs the unmutated tests with coverage: they must pass. It returns how
// long they took and the blocks of the cover profile.
func runBaseline(c config, pkg target, work string) (time.Duration, []block, error) {
	profile := filepath.Join(work, "cover.out")
	args := append([]string{"test", "-vet=off", "-count=1", "-coverprofile=" + profile, "-coverpkg=" + pkg.importPath}, runFlag(c.run)...)
	start := time.Now()
	if out, err := exec.Command("go", append(args, c.testPkgs...)...).CombinedOutput(); err != nil {
		return 0, nil, fmt.Errorf("the unmutated tests fail:\n%s", out)
	}
	baseline := time.Since(start)
	data, err := os.ReadFile(profile)
	if err != nil {
		return 0, nil, err
	}
	return baseline, parseProfile(data), nil
}

// collect lists the mutants of every file of pkg, numbered from 1: PENDING where a
// test reaches the site, NOT COVERED elsewhere. It also returns the files' sources.
func collect(pkg target, blocks []block) ([]Mutant, map[string][]byte, error) {
	var all []Mutant
	srcs := map[string][]byte{}
	for _, name := range pkg.files {
		path := filepath.Join(pkg.dir, name)
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		srcs[path] = src
		ms, err := Sites(path, src)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range ms {
			m.ID = len(all) + 1
			m.Status = "NOT COVERED"
			if covered(blocks, pkg.importPath+"/"+name, m.AnchorLine, m.AnchorCol) {
				m.Status = "PENDING"
			}
			all = append(all, m)
		}
	}
	return all, srcs, nil
}

// choose returns, in order, the indexes of the mutants to run: the reached ones that
// filter matches, narrowed by -resume and -sample (which marks the sampled ones).
func choose(c config, all []Mutant, filter *regexp.Regexp) ([]int, error) {
	var todo []int
	for i, m := range all {
		key := fmt.Sprintf("%s:%d #%d", filepath.Base(m.File), m.Line, m.ID)
		if m.Status == "PENDING" && (filter == nil || filter.MatchString(key)) {
			todo = append(todo, i)
		}
	}
	var again []int // with -resume: the earlier run's survivors, run again whatever the sample
	if c.resume != "" {
		var err error
		if again, todo, err = resumeFrom(c.resume, all, todo); err != nil {
			return nil, err
		}
		if c.sample == 0 { // no sample: finish the earlier run
			todo, again = append(again, todo...), nil
		}
	}
	if c.sample > 0 && c.sample < len(todo) {
		r := rand.New(rand.NewPCG(c.seed, c.seed))
		r.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
		todo = todo[:c.sample]
		for _, i := range todo {
			all[i].Sampled = true
		}
	}
	todo = append(todo, again...)
	slices.Sort(todo)
	return todo, nil
}

// runAll runs the mutants todo names, c.parallel at a time, printing each result and
// saving all of them (-json) as it goes, so that a run stopped part way can be
// resumed.
func runAll(c config, work string, all []Mutant, srcs map[string][]byte, todo []int, timeout time.Duration) {
	var mu sync.Mutex // guards next and all
	next := 0
	var wg sync.WaitGroup
	for w := 0; w < c.parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next == len(todo) {
					mu.Unlock()
					return
				}
				i := todo[next]
				next++
				mu.Unlock()
				status, detail := runMutant(work, all[i], srcs[all[i].File], c.testPkgs, c.run, timeout)
				mu.Lock()
				all[i].Status, all[i].Detail = status, detail
				fmt.Println(all[i])
				if err := writeJSON(c.jsonOut, all); err != nil {
					fmt.Fprintln(os.Stderr, "mutate:", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// report prints the survivors (and, unless filtered, the sites not covered), the
// counts and the score, estimated from the sample when mutants were left unrun, and
// writes -json.
func report(c config, importPath string, all []Mutant, filtered bool) error {
	fmt.Println()
	for _, m := range all {
		if m.Status == "SURVIVED" || m.Status == "NOT COVERED" && !filtered {
			fmt.Println(m)
		}
	}
	k, s, nc, p := countStatus(all, "KILLED")+countStatus(all, "TIMED OUT"), countStatus(all, "SURVIVED"), countStatus(all, "NOT COVERED"), countStatus(all, "PENDING")
	fmt.Printf("\n%s: killed %d (timed out %d), survived %d, not covered %d, invalid %d, not run %d\n",
		importPath, k, countStatus(all, "TIMED OUT"), s, nc, countStatus(all, "INVALID"), p)
	switch {
	case filtered || k+s+nc == 0:
	case p == 0:
		fmt.Printf("score (not covered counted as survived): %.1f%% (%d/%d)\n", 100*float64(k)/float64(k+s+nc), k, k+s+nc)
	default:
		printEstimate(all, k, s, nc, p)
	}
	return writeJSON(c.jsonOut, all)
}

// printEstimate prints the score a sample estimates: the kill rate of the randomly
// chosen mutants stands for the reached mutants not run.
func printEstimate(all []Mutant, k, s, nc, p int) {
	var ks, ss int
	for _, m := range all {
		switch {
		case !m.Sampled:
		case m.Status == "KILLED" || m.Status == "TIMED OUT":
			ks++
		case m.Status == "SURVIVED":
			ss++
		}
	}
	if ks+ss > 0 {
		rate := float64(ks) / float64(ks+ss)
		fmt.Printf("sample: %d of %d killed (%.1f%%); estimated score (not covered counted as survived): %.1f%% of %d\n",
			ks, ks+ss, 100*rate, 100*(float64(k)+rate*float64(p))/float64(k+s+p+nc), k+s+p+nc)
	}
}

func writeJSON(path string, all []Mutant) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(all, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// resumeFrom takes an earlier run's results, a -json file or the log it printed: its
// killed and invalid mutants keep their status and its unsampled ones stay not run. It
// returns the reached mutants to run again (survivors, and sites it found not covered)
// and those it never ran (absent from it, or still pending when it stopped).
// Mutants are matched by file name, position and change, so the earlier run may come
// from another checkout; a mutant of an edited file matches only where its line did
// not move.
func resumeFrom(path string, all []Mutant, reached []int) (again, never []int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var prev []Mutant
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(data, &prev); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
	} else {
		prev = parseLog(data)
	}
	old := map[string]Mutant{}
	for _, m := range prev {
		old[m.key()] = m
	}
	for _, i := range reached {
		m, ok := old[all[i].key()]
		all[i].Sampled = m.Sampled
		switch {
		case !ok, m.Status == "PENDING":
			never = append(never, i)
		case m.Status == "SURVIVED", m.Status == "NOT COVERED":
			again = append(again, i)
		default:
			all[i].Status, all[i].Detail = m.Status, m.Detail
		}
	}
	return again, never, nil
}

// key names a mutant across checkouts: file name, position, operator and replacement.
func (m Mutant) key() string {
	return fmt.Sprintf("%s:%d:%d %s %q", filepath.Base(m.File), m.Line, m.Col, m.Op, m.Repl)
}

// logLine is one result line as Mutant.String prints it.
var logLine = regexp.MustCompile(`^(KILLED|SURVIVED|TIMED OUT|INVALID|NOT COVERED)\s+#\d+ (\S+):(\d+):(\d+) (\w+) ("(?:[^"\\]|\\.)*") -> ("(?:[^"\\]|\\.)*")`)

// parseLog reads the mutants of a printed run (the summary repeats survivors: the
// last line of a mutant wins, and they agree).
func parseLog(data []byte) []Mutant {
	var ms []Mutant
	for _, f := range lineMatches(data, logLine) {
		ln, _ := strconv.Atoi(f[3])
		col, _ := strconv.Atoi(f[4])
		repl, err := strconv.Unquote(f[7])
		if err != nil {
			continue
		}
		ms = append(ms, Mutant{File: f[2], Line: ln, Col: col, Op: f[5], Repl: repl, Status: f[1]})
	}
	return ms
}

func runFlag(run string) []string {
	if run == "" {
		return nil
	}
	return []string{"-run", run}
}

func countStatus(ms []Mutant, status string) (n int) {
	for _, m := range ms {
		if m.Status == status {
			n++
		}
	}
	return n
}

// runMutant builds and tests one mutant through an overlay.
func runMutant(work string, m Mutant, src []byte, testPkgs []string, run string, timeout time.Duration) (status, detail string) {
	d := filepath.Join(work, strconv.Itoa(m.ID))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "INVALID", err.Error()
	}
	defer os.RemoveAll(d)
	mutated := filepath.Join(d, filepath.Base(m.File))
	overlay := filepath.Join(d, "overlay.json")
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {m.File: mutated}})
	if os.WriteFile(mutated, Apply(src, m), 0o644) != nil || os.WriteFile(overlay, ov, 0o644) != nil {
		return "INVALID", "cannot write the overlay"
	}
	// Building may wait for the CPU; only the tests' own run is bounded by -timeout.
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()
	args := append([]string{"test", "-vet=off", "-count=1", "-failfast", "-overlay=" + overlay, "-timeout=" + timeout.String()}, runFlag(run)...)
	cmd := exec.CommandContext(ctx, "go", append(args, testPkgs...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := out.String()
	switch {
	case err == nil:
		return "SURVIVED", ""
	case strings.Contains(text, "[build failed]") || strings.Contains(text, "[setup failed]"):
		return "INVALID", firstLine(text, "")
	case strings.Contains(text, "test timed out") || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "TIMED OUT", ""
	default:
		return "KILLED", firstLine(text, "--- FAIL")
	}
}

func firstLine(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) && strings.TrimSpace(l) != "" {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
