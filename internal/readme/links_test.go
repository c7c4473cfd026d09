package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// markdownLink is an inline link or image: [text](target) or [text](target "title").
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeFence is a fenced code block, whose brackets are code, not links.
var codeFence = regexp.MustCompile("(?s)```.*?```")

// codeSpan is inline code.
var codeSpan = regexp.MustCompile("`[^`\n]*`")

// markdownFiles are the README and every Markdown file under docs/, history included.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md"}
	err := filepath.WalkDir("../../docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// links returns the relative link targets of a Markdown text, code left out.
func links(text string) []string {
	text = codeSpan.ReplaceAllString(codeFence.ReplaceAllString(text, ""), "")
	var out []string
	for _, m := range markdownLink.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		out = append(out, target)
	}
	return out
}

// anchors returns the heading anchors GitHub makes for a Markdown text: the heading
// lower-cased, punctuation but '-' and '_' dropped, spaces as '-'.
func anchors(text string) map[string]bool {
	text = codeFence.ReplaceAllString(text, "")
	out := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		slug := b.String()
		for n := 1; out[slug]; n++ { // a repeated heading gets -1, -2, ...
			slug = b.String() + "-" + strconv.Itoa(n)
		}
		out[slug] = true
	}
	return out
}

// Every relative link of the README and docs/ names a file or directory of the
// repository, and a #fragment a heading of the Markdown file it points at.
func TestRelativeLinksResolve(t *testing.T) {
	for _, file := range markdownFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(text)) {
			path, fragment, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(resolved); err != nil {
					t.Errorf("%s: link %q: %s does not exist", strings.TrimPrefix(file, "../../"), target, path)
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			body, err := os.ReadFile(resolved)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(body))[fragment] {
				t.Errorf("%s: link %q: no heading makes #%s", strings.TrimPrefix(file, "../../"), target, fragment)
			}
		}
	}
}

// docPath is a path under docs/ named in code, comments or build files.
var docPath = regexp.MustCompile(`\bdocs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)

// The docs/ files that code, comments, the Makefile and scripts name exist.
func TestDocsNamedInCodeExist(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "--full-name", "../..").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	checked := 0
	for _, f := range strings.Fields(string(out)) {
		if !strings.HasSuffix(f, ".go") && !strings.HasSuffix(f, ".sh") && filepath.Base(f) != "Makefile" {
			continue
		}
		text, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			continue // deleted in the working tree
		}
		for _, p := range docPath.FindAllString(string(text), -1) {
			checked++
			if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
				t.Errorf("%s names %s, which does not exist", f, p)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no docs/ path found in code; the pattern is broken")
	}
}

// The link and anchor readers themselves.
func TestLinkReaders(t *testing.T) {
	text := "See [a](a.md), [b](../b.md#part \"t\"), ![img](p.png), [web](https://x.y/z), `[code](no.md)`.\n" +
		"```\n[fenced](no.md)\n```\n# Part one: the A-Z, of it\n## Part one: the A-Z, of it\n"
	got := strings.Join(links(text), " ")
	if want := "a.md ../b.md#part p.png"; got != want {
		t.Errorf("links = %q; want %q", got, want)
	}
	a := anchors(text)
	if !a["part-one-the-a-z-of-it"] || !a["part-one-the-a-z-of-it-1"] || len(a) != 2 {
		t.Errorf("anchors = %v; want part-one-the-a-z-of-it and its -1", a)
	}
}
