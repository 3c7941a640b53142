package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	t.Setenv("CROSSTALK_HTTP_TOKEN", "") // serve --http :0 must find no token
	for _, tt := range []struct {
		args             []string
		code             int
		stdout, stderr   string
		stdoutHasVersion bool
	}{
		{[]string{"--help"}, 0, usage, "", false},
		{[]string{"-h"}, 0, usage, "", false},
		{[]string{"--version"}, 0, version + "\n" + compatibility + "\n", "", true},
		{[]string{"serve", "--nope", "x"}, 2, "", "crosstalk-mcp serve: unrecognized option: --nope; run 'crosstalk-mcp serve --help'\n", false},
		{[]string{"serve", "--http", ":0"}, 2, "", "crosstalk-mcp serve: refusing to listen on :0 without a token: " +
			"a non-loopback address lets anyone who can reach it read and write every group. Give --token-file PATH, --tokens-file PATH or set " +
			"CROSSTALK_HTTP_TOKEN (or bind 127.0.0.1); run 'crosstalk-mcp serve --help'\n", false},
		{[]string{"serve", "--help"}, 0, serveHelp, "", false},
		{[]string{"serve", "--http", "localhost"}, 2, "", "crosstalk-mcp serve: invalid value \"localhost\" for flag --http: " +
			"--http address \"localhost\": want host:port, or a port number up to 65535; run 'crosstalk-mcp serve --help'\n", false},
		{[]string{"serve", "--http", "127.0.0.1:8808/mcp"}, 2, "", "crosstalk-mcp serve: invalid value \"127.0.0.1:8808/mcp\" for flag --http: " +
			"--http address \"127.0.0.1:8808/mcp\": want host:port, or a port number up to 65535; run 'crosstalk-mcp serve --help'\n", false},
		{[]string{"hooks", "install", "--client", "codex", "--scope", "foo"}, 2, "",
			"crosstalk-mcp hooks install: --scope must be user or project, not \"foo\"; run 'crosstalk-mcp hooks install --help'\n", false},
		{[]string{"hooks", "uninstall", "--client", "zed"}, 2, "", "crosstalk-mcp hooks uninstall: --client must be one of " +
			"antigravity, claude-code, codex, cursor, gemini, vscode; run 'crosstalk-mcp hooks uninstall --help'\n", false},
		{[]string{"hooks", "remove"}, 2, "", "crosstalk-mcp hooks: expected install or uninstall; run 'crosstalk-mcp hooks --help'\n", false},
		{[]string{"status", "--events", "x", "--context-id", "c"}, 2, "",
			"crosstalk-mcp status: invalid value \"x\" for flag --events: parse error; run 'crosstalk-mcp status --help'\n", false},
		{[]string{"status", "--events", "-1", "--context-id", "c"}, 2, "",
			"crosstalk-mcp status: --events must be at least 1, not -1; run 'crosstalk-mcp status --help'\n", false},
		{[]string{"status", "--events", "0", "--context-id", "c"}, 2, "",
			"crosstalk-mcp status: --events must be at least 1, not 0; run 'crosstalk-mcp status --help'\n", false},
		{[]string{"doctor", "extra"}, 2, "", "crosstalk-mcp doctor: unexpected argument \"extra\"; run 'crosstalk-mcp doctor --help'\n", false},
		{[]string{"sever"}, 2, "", "Unknown command: sever; run 'crosstalk-mcp --help'\n", false},
		{[]string{"--port"}, 2, "", "Unknown command: --port; run 'crosstalk-mcp --help'\n", false},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, strings.NewReader(""), &stdout, &stderr)
			if code != tt.code || stdout.String() != tt.stdout || stderr.String() != tt.stderr {
				t.Errorf("got %d %q %q; want %d %q %q", code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
			}
			// The exact match above is only as good as version: an empty
			// version would make --version print a bare newline.
			if got := version != "" && strings.Contains(stdout.String(), version); got != tt.stdoutHasVersion {
				t.Errorf("got version %q in stdout %v; want %v", version, got, tt.stdoutHasVersion)
			}
		})
	}
}

// TestEveryCommandAnswersHelp holds the one command-line convention: every
// command answers -h and --help with its usage on stdout and exit 0, and a
// bad flag with one line on stderr that points at its --help and exit 2;
// hook and wait exit 0 even then, since they never fail their client (and
// wait's 2 means a wakeup).
func TestEveryCommandAnswersHelp(t *testing.T) {
	t.Setenv("CROSSTALK_GROUPS_DIR", t.TempDir())
	for _, tc := range []struct {
		command   string
		badStatus int
	}{
		{"", 2}, {"serve", 2}, {"observe", 2}, {"hook", 0}, {"wait", 0}, {"hooks", 2},
		{"hooks install", 2}, {"hooks uninstall", 2}, {"status", 2}, {"doctor", 2},
	} {
		words := strings.Fields(tc.command)
		for _, help := range []string{"--help", "-h"} {
			t.Run(tc.command+" "+help, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				code := run(append(words, help), strings.NewReader(""), &stdout, &stderr)
				want := strings.TrimSpace("usage: crosstalk-mcp " + strings.Join(words[:min(len(words), 1)], ""))
				if code != 0 || !strings.HasPrefix(strings.ToLower(stdout.String()), want) || stderr.Len() != 0 {
					t.Errorf("got exit %d, stdout %.60q, stderr %q; want 0, %q..., nothing", code, stdout.String(), stderr.String(), want)
				}
			})
		}
		t.Run(tc.command+" --bogus", func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append(words, "--bogus"), strings.NewReader(""), &stdout, &stderr)
			want := "; run '" + strings.Join(append([]string{"crosstalk-mcp"}, words...), " ") + " --help'\n"
			if code != tc.badStatus || stdout.Len() != 0 || !strings.HasSuffix(stderr.String(), want) || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("got exit %d, stdout %q, stderr %q; want %d, nothing, one line ending %q", code, stdout.String(), stderr.String(), tc.badStatus, want)
			}
		})
	}
}

// TestUsageNamesEveryFlagInUse checks that a command's --help names every
// flag that the hooks `hooks install` writes, or README, pass to it.
func TestUsageNamesEveryFlagInUse(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{string(readme)}
	for _, h := range hookInstallTargets {
		for _, e := range h.entries {
			lines = append(lines, hookLauncher{exe: "crosstalk-mcp", groupsDir: "/srv/groups"}.command(e))
		}
	}
	commandLine := regexp.MustCompile("crosstalk-mcp (hooks (?:un)?install|serve|observe|hook|wait|status|doctor)\\b([^`|\n]*)")
	used := map[string]map[string]bool{}
	for _, m := range commandLine.FindAllStringSubmatch(strings.Join(lines, "\n"), -1) {
		for _, f := range regexp.MustCompile(`--[a-z-]+`).FindAllString(m[2], -1) {
			if used[m[1]] == nil {
				used[m[1]] = map[string]bool{}
			}
			used[m[1]][f] = true
		}
	}
	for _, command := range []string{"wait", "hook", "status", "hooks install"} {
		if len(used[command]) == 0 {
			t.Errorf("found no flags passed to %s; want the hooks' and README's", command)
		}
	}
	for command, flags := range used {
		var help bytes.Buffer
		run(append(strings.Fields(command), "--help"), strings.NewReader(""), &help, io.Discard)
		for f := range flags {
			if !strings.Contains(help.String(), " "+f+" ") {
				t.Errorf("crosstalk-mcp %s --help does not name %s, which is in use", command, f)
			}
		}
	}
}

func TestServeExitsOnEOF(t *testing.T) {
	t.Setenv("CROSSTALK_GROUPS_DIR", t.TempDir())
	var stdout, stderr bytes.Buffer
	in := `{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"
	if code := run(nil, strings.NewReader(in), &stdout, &stderr); code != 0 {
		t.Fatalf("got exit %d (%s); want 0", code, stderr.String())
	}
	if got := stdout.String(); got != `{"jsonrpc": "2.0", "id": 1, "result": {}}`+"\n" {
		t.Errorf("got %q", got)
	}
}

func TestGroupsDirFromEnv(t *testing.T) {
	t.Setenv("CROSSTALK_GROUPS_DIR", "/srv/groups")
	if got, _ := groupsDirFromEnv(); got != "/srv/groups" {
		t.Errorf("got %s; want /srv/groups", got)
	}
	t.Setenv("CROSSTALK_GROUPS_DIR", "")
	t.Setenv("HOME", "/home/u")
	if got, _ := groupsDirFromEnv(); got != "/home/u/.cache/crosstalk" {
		t.Errorf("got %s; want /home/u/.cache/crosstalk", got)
	}
}

// TestDeps holds the dependency policy the README states: go.mod requires
// one module directly, modernc.org/sqlite, and the binary links no testing
// code (tools such as staticcheck are installed, never required).
func TestDeps(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var direct []string
	inBlock := false
	for _, line := range strings.Split(string(mod), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if fields := strings.Fields(line); len(fields) >= 2 && !strings.Contains(line, "// indirect") {
			direct = append(direct, fields[0])
		}
	}
	if fmt.Sprint(direct) != "[modernc.org/sqlite]" {
		t.Errorf("go.mod requires %v directly; want only [modernc.org/sqlite]", direct)
	}

	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "testing" || strings.HasPrefix(pkg, "testing/") {
			t.Errorf("the binary imports %s; want no testing package outside _test.go files", pkg)
		}
	}
}

// TestReadmeListsEveryFile checks that the File map of docs/architecture.md,
// which README links to, names every production .go file exactly once, one
// per row, and no file that does not exist, so that the layout it describes
// stays the real one.
func TestReadmeListsEveryFile(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## File map\n")
	if !ok {
		t.Fatal("docs/architecture.md has no File map section")
	}
	section, _, _ = strings.Cut(section, "\n#")
	listed := map[string]int{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasSuffix(strings.TrimSpace(cells[1]), ".go`") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		listed[name]++
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	production := map[string]bool{}
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			production[f] = true
			if listed[f] != 1 {
				t.Errorf("docs/architecture.md File map lists %s %d times; want once, in a row of its own", f, listed[f])
			}
		}
	}
	for name := range listed {
		if !production[name] {
			t.Errorf("docs/architecture.md File map lists %s; want only production files that exist", name)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(docs/architecture.md)") {
		t.Error("README.md does not link docs/architecture.md; want the file map reachable from it")
	}
}

// TestReadmeTokenCommandWorks runs the README's command that makes the
// shared token of serve --http, as written, in a fresh home directory: it
// must leave a token file only its owner can read, which serve accepts.
func TestReadmeTokenCommandWorks(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil || runtime.GOOS == "windows" {
		t.Skip("needs a POSIX sh")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var command string
	for line := range strings.Lines(string(readme)) {
		if strings.Contains(line, "head -c 32 /dev/urandom") {
			command = line
		}
	}
	if command == "" {
		t.Fatal("README.md has no line making the token with head -c 32 /dev/urandom")
	}
	home := t.TempDir()
	cmd := exec.Command("sh", "-c", command)
	cmd.Env = append(os.Environ(), "HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sh -c %q in a fresh HOME: got %v %s; want success", command, err, out)
	}
	path := filepath.Join(home, ".config", "crosstalk", "token")
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token file: got %v, %v; want mode 0600", info, err)
	}
	if _, err := parseServeOptions([]string{"--http", "8808", "--token-file", path}, func(string) string { return "" }); err != nil {
		t.Errorf("serve --token-file: got %v; want the token accepted", err)
	}
}
