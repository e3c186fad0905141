package main

// Tests of the Seatbelt policy generator (seatbelt.go, docs/sandbox.md §5): whole policies
// against golden files in testdata/seatbelt, the escaping of paths into regexes, and what
// those regexes match. sandbox-exec itself needs a Mac; these run anywhere.
//
// SEATBELT_GOLDEN_UPDATE=1 go test -run Seatbelt . rewrites the golden files.

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// seatbeltGoldenUpdate is the environment variable that rewrites the golden files.
const seatbeltGoldenUpdate = "SEATBELT_GOLDEN_UPDATE"

// seatbeltTestProtected is what resolve puts in Protected for these writable roots (their
// protected names, none of them a .git file), plus the gitdir targets given.
func seatbeltTestProtected(roots []string, gitdirs ...string) []string {
	var out []string
	for _, root := range roots {
		for _, name := range protectedNames {
			out = append(out, joinPath(root, name))
		}
	}
	return uniquePaths(append(out, gitdirs...))
}

// seatbeltTestProfiles are the profiles with a golden file each, by file name.
func seatbeltTestProfiles() map[string]*sandboxProfile {
	workspace := []string{"/Users/dev/project", "/Users/dev/notes", "/private/tmp", "/private/var/folders/k2/x7q9/T"}
	nested := []string{"/Users/dev/project", "/Users/dev/project/build"}
	awkward := []string{`/Users/dev/c++ (v1.2) [old] {x} $y ^z |w *?\`, `/Users/dev/say "hi"`}
	return map[string]*sandboxProfile{
		"read_only": {Kind: profileManaged, FullRead: true},
		"workspace_write": {
			Kind: profileManaged, FullRead: true, Write: workspace,
			// notes is a worktree of project: its .git file points into project's .git.
			Protected: seatbeltTestProtected(workspace, "/Users/dev/project/.git/worktrees/notes"),
		},
		"restricted_read": {
			Kind: profileManaged, Read: []string{"/Users/dev/docs", "/Users/dev/project/docs", "/opt/homebrew"},
			Write: []string{"/Users/dev/project"}, Protected: seatbeltTestProtected([]string{"/Users/dev/project"}),
		},
		"network_enabled": {Kind: profileManaged, Network: true, FullRead: true},
		"deny": {
			Kind: profileManaged, FullRead: true, Write: []string{"/Users/dev/project"},
			Deny:      []string{"/Users/dev/.ssh", "/Users/dev/project/.env"},
			Protected: seatbeltTestProtected([]string{"/Users/dev/project"}),
		},
		"full_access":         {Kind: profileManaged, Network: true, FullRead: true, FullWrite: true},
		"external_no_network": {Kind: profileExternal, FullRead: true, FullWrite: true},
		"nested_and_carve_outs": {
			// A root inside a root, a read-only directory inside a root, and a gitdir target
			// that no protected name covers.
			Kind: profileManaged, FullRead: true, Write: nested,
			Read:      []string{"/Users/dev/project/vendor"},
			Protected: seatbeltTestProtected(nested, "/Users/dev/project/.repos/build"),
		},
		"awkward_roots": {
			Kind: profileManaged, FullRead: true, Write: awkward,
			Protected: seatbeltTestProtected(awkward),
		},
	}
}

// readSeatbeltGolden reads a golden file: the policy text (its "policy" section) and its
// parameters (its "params" section, one KEY=value a line).
func readSeatbeltGolden(t *testing.T, path string) seatbeltPolicy {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%v (%s=1 writes it)", err, seatbeltGoldenUpdate)
	}
	c := readVectorCase(t, path)
	c.only(t, "profile")
	pol := seatbeltPolicy{Text: c.section(t, "policy")}
	for line := range strings.Lines(c.section(t, "params")) {
		pol.Params = append(pol.Params, strings.TrimSuffix(line, "\n"))
	}
	return pol
}

// writeSeatbeltGolden writes pol in the form readSeatbeltGolden reads.
func writeSeatbeltGolden(t *testing.T, path string, pol seatbeltPolicy) {
	t.Helper()
	var params strings.Builder
	for _, kv := range pol.Params {
		params.WriteString(kv + "\n")
	}
	header := "# The Seatbelt policy of the profile " + filepath.Base(path) + " (docs/sandbox.md §5).\n"
	writeVectorSections(t, path, header, vectorSection{"policy", pol.Text}, vectorSection{"params", params.String()})
}

func TestSeatbeltPolicyGolden(t *testing.T) {
	update := os.Getenv(seatbeltGoldenUpdate) == "1"
	for name, p := range seatbeltTestProfiles() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", "seatbelt", name+".txt")
			got := seatbeltPolicyFor(p)
			if update {
				writeSeatbeltGolden(t, path, got)
			}
			want := readSeatbeltGolden(t, path)
			if got.Text != want.Text {
				t.Errorf("policy text differs from %s:\n%s", path, got.Text)
			}
			if !slices.Equal(got.Params, want.Params) {
				t.Errorf("params differ from %s:\n got %q\nwant %q", path, got.Params, want.Params)
			}
		})
	}
}

// sbplForm is a top-level form of a profile: its first two words, "allow file-read*".
type sbplForm struct{ head string }

// parseSBPL checks that text is well formed as far as sandbox-exec's reader cares (balanced
// parentheses, closed strings and regex literals, comments to the end of the line) and
// returns its top-level forms.
func parseSBPL(t *testing.T, text string) []sbplForm {
	t.Helper()
	var forms []sbplForm
	depth, start := 0, 0
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c == ';':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '#' && i+1 < len(text) && text[i+1] == '"':
			// A raw regex literal: up to the next quote, backslashes included.
			end := strings.IndexByte(text[i+2:], '"')
			if end < 0 {
				t.Fatalf("regex literal at %d not closed", i)
			}
			i += 2 + end
		case c == '"':
			j := i + 1
			for ; j < len(text) && text[j] != '"'; j++ {
				if text[j] == '\\' {
					j++
				}
			}
			if j >= len(text) {
				t.Fatalf("string at %d not closed", i)
			}
			i = j
		case c == '(':
			if depth == 0 {
				start = i
			}
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				t.Fatalf("unbalanced ) at %d", i)
			}
			if depth == 0 {
				words := strings.Fields(strings.Trim(text[start:i+1], "()"))
				forms = append(forms, sbplForm{head: strings.Join(words[:min(2, len(words))], " ")})
			}
		}
	}
	if depth != 0 {
		t.Fatalf("%d parentheses left open", depth)
	}
	return forms
}

var (
	sbplParamRef    = regexp.MustCompile(`\(param "([^"]*)"\)`)
	sbplRegexLitRef = regexp.MustCompile(`#"([^"]*)"`)
)

// TestSeatbeltPolicyWellFormed checks every golden profile: it parses, starts closed, names
// only parameters it is given and is given only those it names, keeps the denials last, and
// every regex in it compiles.
func TestSeatbeltPolicyWellFormed(t *testing.T) {
	for name, p := range seatbeltTestProfiles() {
		t.Run(name, func(t *testing.T) {
			pol := seatbeltPolicyFor(p)
			forms := parseSBPL(t, pol.Text)
			if len(forms) < 2 || forms[0].head != "version 1" || forms[1].head != "deny default" {
				t.Fatalf("policy does not start with (version 1) (deny default): %v", forms[:min(2, len(forms))])
			}
			denyAt := slices.IndexFunc(forms, func(f sbplForm) bool { return f.head == "deny file-read*" })
			if denyAt >= 0 && slices.ContainsFunc(forms[denyAt:], func(f sbplForm) bool { return strings.HasPrefix(f.head, "allow") }) {
				t.Errorf("an allow follows the denials")
			}
			if denials := len(forms) - denyAt; denyAt < 0 && len(p.Deny) > 0 || denyAt >= 0 && denials != len(p.Deny) {
				t.Errorf("denials from form %d for %d denied paths", denyAt, len(p.Deny))
			}
			given := map[string]bool{}
			for _, kv := range pol.Params {
				key, _, _ := strings.Cut(kv, "=")
				if given[key] {
					t.Errorf("parameter %s given twice", key)
				}
				given[key] = true
			}
			named := map[string]bool{}
			for _, m := range sbplParamRef.FindAllStringSubmatch(pol.Text, -1) {
				named[m[1]] = true
				if !given[m[1]] {
					t.Errorf("policy names %s, which is not given", m[1])
				}
			}
			for key := range given {
				if !named[key] {
					t.Errorf("parameter %s given, never named", key)
				}
			}
			for _, m := range sbplRegexLitRef.FindAllStringSubmatch(pol.Text, -1) {
				if _, err := regexp.Compile(m[1]); err != nil {
					t.Errorf("regex %q: %v", m[1], err)
				}
			}
		})
	}
}

func TestSeatbeltRegexQuote(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"/Users/dev/project", "/Users/dev/project", true},
		{"/Users/dev/my.app", `/Users/dev/my\.app`, true},
		{"/src/c++", `/src/c\+\+`, true},
		{"/x[1]", `/x\[1]`, true},
		{"/{a,b}", `/\{a,b}`, true},
		{"/(x)|y", `/\(x\)\|y`, true},
		{"/what?*", `/what\?\*`, true},
		{"/$HOME^", `/\$HOME\^`, true},
		{`/back\slash`, `/back\\slash`, true},
		{"/with space/and-dash_under", "/with space/and-dash_under", true},
		{"/it's;#~&%@!=,", "/it's;#~&%@!=,", true},
		{"/ünï/日本", "/ünï/日本", true},
		{`/say "hi"`, "", false},
		{"/tab\there", "", false},
		{"/new\nline", "", false},
		{"/del\x7f", "", false},
		{"/bad\xffutf8", "", false},
	} {
		got, ok := seatbeltRegexQuote(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("seatbeltRegexQuote(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if !ok {
			continue
		}
		re, err := regexp.Compile("^" + got + "$")
		if err != nil {
			t.Errorf("seatbeltRegexQuote(%q) = %q does not compile: %v", tc.in, got, err)
			continue
		}
		if !re.MatchString(tc.in) {
			t.Errorf("%q does not match %q", got, tc.in)
		}
	}
}

// TestSeatbeltProtectedRegex evaluates the protected-name regexes with Go's regexp, which
// agrees with POSIX extended regexes on the escapes and constructs they use.
func TestSeatbeltProtectedRegex(t *testing.T) {
	roots := []string{
		"/",
		"/Users/dev/project",
		"/Users/dev/my.project",
		"/Users/dev/c++",
		"/Users/dev/x[1]",
		"/Users/dev/with space",
		"/Users/dev/(a|b)?*{2}",
		`/Users/dev/back\slash`,
		"/Users/dev/$^",
		"/Users/dev/it's",
	}
	for _, root := range roots {
		pattern, ok := seatbeltProtectedRegex(root, ".git")
		if !ok {
			t.Errorf("no regex for %q", root)
			continue
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			t.Errorf("%q: %v", pattern, err)
			continue
		}
		base := strings.TrimSuffix(root, "/")
		for _, path := range []string{base + "/.git", base + "/.git/config", base + "/.git/refs/heads/main"} {
			if !re.MatchString(path) {
				t.Errorf("%q does not match %q", pattern, path)
			}
		}
		reject := []string{
			base + "/.github", base + "/.gitignore", base + "/.github/workflows",
			base + "/sub/.git", base + "/sub/.git/config", base + "/Xgit", base + "/.gi",
			base + "x/.git", base, "/elsewhere/.git", "prefix" + base + "/.git",
		}
		if i := strings.IndexAny(base, `.+[(*?$^\`); i >= 0 {
			// A metacharacter taken for itself: the root with another character in its place.
			reject = append(reject, base[:i]+"Q"+base[i+1:]+"/.git")
		}
		for _, path := range reject {
			if re.MatchString(path) {
				t.Errorf("%q matches %q", pattern, path)
			}
		}
	}
	if _, ok := seatbeltProtectedRegex(`/Users/dev/say "hi"`, ".git"); ok {
		t.Errorf("a root with a double quote got a regex literal")
	}
}

// TestSeatbeltQuotedRootFallsBack checks that a root no regex literal can hold keeps its
// protected names read-only by parameters instead, and never puts its path in the text.
func TestSeatbeltQuotedRootFallsBack(t *testing.T) {
	root := `/Users/dev/xyzzy "hi")) (allow default`
	p := &sandboxProfile{Kind: profileManaged, FullRead: true, Write: []string{root}, Protected: seatbeltTestProtected([]string{root})}
	pol := seatbeltPolicyFor(p)
	if strings.Contains(pol.Text, "xyzzy") || strings.Contains(pol.Text, "allow default") {
		t.Fatalf("the root's path reached the policy text:\n%s", pol.Text)
	}
	parseSBPL(t, pol.Text)
	var excluded []string
	for _, kv := range pol.Params {
		if key, value, _ := strings.Cut(kv, "="); strings.HasPrefix(key, "WRITABLE_ROOT_0_EXCLUDED_") {
			excluded = append(excluded, value)
		}
	}
	var want []string
	for _, name := range protectedNames {
		want = append(want, joinPath(root, name))
	}
	slices.Sort(excluded)
	slices.Sort(want)
	if !slices.Equal(excluded, want) {
		t.Errorf("excluded %q, want the protected names %q", excluded, want)
	}
}

func TestSeatbeltArgs(t *testing.T) {
	pol := seatbeltPolicy{Text: "(version 1)", Params: []string{"WRITABLE_ROOT_0=/a b", "DENIED_0=/c=d"}}
	got := seatbeltArgs(pol, "/bin/echo", []string{"--", "-p", "x"})
	want := []string{"/usr/bin/sandbox-exec", "-p", "(version 1)", "-DWRITABLE_ROOT_0=/a b", "-DDENIED_0=/c=d", "--", "/bin/echo", "--", "-p", "x"}
	if !slices.Equal(got, want) {
		t.Errorf("seatbeltArgs = %q, want %q", got, want)
	}
	if got := seatbeltArgs(seatbeltPolicy{Text: "t"}, "/bin/true", nil); !slices.Equal(got, []string{"/usr/bin/sandbox-exec", "-p", "t", "--", "/bin/true"}) {
		t.Errorf("seatbeltArgs without params or args = %q", got)
	}
}

// TestSeatbeltNetwork checks that only an unrestricted network gets sockets.
func TestSeatbeltNetwork(t *testing.T) {
	for _, tc := range []struct {
		p    sandboxProfile
		want bool
	}{
		{sandboxProfile{Kind: profileManaged, FullRead: true}, false},
		{sandboxProfile{Kind: profileManaged, FullRead: true, Network: true}, true},
		{sandboxProfile{Kind: profileExternal, FullRead: true, FullWrite: true}, false},
		{sandboxProfile{Kind: profileExternal, FullRead: true, FullWrite: true, Network: true}, true},
		{sandboxProfile{Kind: profileDisabled, FullRead: true, FullWrite: true}, true},
	} {
		text := seatbeltPolicyFor(&tc.p).Text
		if got := strings.Contains(text, "(allow network-outbound)"); got != tc.want {
			t.Errorf("%+v: network allowed %v, want %v", tc.p, got, tc.want)
		}
	}
}
