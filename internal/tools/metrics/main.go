// Command metrics prints the figures internal/archtest keeps bounded, for every package
// of the root module and the nested ones: exported names and test files per package,
// the functions over the length or complexity bound, and, when the duplicates command
// is on the PATH, the pairs of repeated places in non-test code and in all code.
//
//	go run ./internal/tools/metrics [DIR ...]
//
// It measures the repository around the working directory. Each DIR (relative to the
// repository root) also gets a count of duplicates pairs in its non-test code alone.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/brokerguard/brokerguard/internal/archtest"
)

func main() {
	flag.Parse()
	root, err := repoRoot()
	if err != nil {
		fail(err)
	}
	pkgs, err := archtest.Measure(root)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%-40s %8s %6s %10s\n", "package", "exported", "bound", "test files")
	var over []archtest.Func
	for _, p := range pkgs {
		bound := archtest.ExportedBound(p.Dir)
		fmt.Printf("%-40s %8d %6d %10d\n", p.Dir, p.Exported, bound, p.TestFiles)
		for _, f := range p.Funcs {
			if f.Lines > archtest.MaxFuncLines || f.Complexity > archtest.MaxComplexity {
				over = append(over, f)
			}
		}
	}
	fmt.Printf("\nfunctions over %d lines or cyclomatic %d: %d\n", archtest.MaxFuncLines, archtest.MaxComplexity, len(over))
	for _, f := range over {
		fmt.Printf("  %-60s %4d lines  cyclomatic %3d  %s:%d\n", f.Name, f.Lines, f.Complexity, f.File, f.Line)
	}
	if _, err := exec.LookPath("duplicates"); err != nil {
		fmt.Println("\nduplicates: not on the PATH, pairs not counted")
		return
	}
	files, err := gitFiles(root)
	if err != nil {
		fail(err)
	}
	fmt.Println()
	dirs := append([]string{"."}, flag.Args()...)
	for _, dir := range dirs {
		line, err := duplicatesNonTest(root, files, dir)
		if err != nil {
			fail(err)
		}
		fmt.Printf("duplicates, non-test code of %s: %s\n", dir, line)
	}
	line, err := duplicatesLine(root)
	if err != nil {
		fail(err)
	}
	fmt.Printf("duplicates, all code: %s\n", line)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "metrics:", err)
	os.Exit(1)
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --show-toplevel: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// gitFiles lists the files duplicates would read: tracked, or untracked and not ignored.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-co", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	return strings.Fields(string(out)), nil
}

// duplicatesNonTest copies the files below dir, less the _test.go ones, into a
// temporary tree and returns duplicates' count line for it.
func duplicatesNonTest(root string, files []string, dir string) (string, error) {
	tmp, err := os.MkdirTemp("", "metrics")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	prefix := strings.TrimSuffix(filepath.ToSlash(dir), "/") + "/"
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || dir != "." && !strings.HasPrefix(f, prefix) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			if os.IsNotExist(err) { // deleted in the working tree, not yet in the index
				continue
			}
			return "", err
		}
		dst := filepath.Join(tmp, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return "", err
		}
	}
	return duplicatesLine(tmp)
}

// duplicatesLine runs duplicates over dir and returns the first line it prints.
func duplicatesLine(dir string) (string, error) {
	out, err := exec.Command("duplicates", "--repo", dir, "--most", "1", "--seconds", "120").Output()
	if err != nil {
		return "", fmt.Errorf("duplicates: %w", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return first, nil
}
