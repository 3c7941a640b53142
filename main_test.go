package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
		{[]string{"serve", "--nope", "x"}, 2, "", serveUsage + "crosstalk-mcp serve: error: unrecognized arguments: --nope x\n", false},
		{[]string{"serve", "--http", ":0"}, 2, "", serveUsage + "crosstalk-mcp serve: error: refusing to listen on :0 without a token: " +
			"a non-loopback address lets anyone who can reach it read and write every group. Give --token-file PATH or set " +
			"CROSSTALK_HTTP_TOKEN (or bind 127.0.0.1)\n", false},
		{[]string{"serve", "--help"}, 0, serveHelp, "", false},
		{[]string{"sever"}, 2, "", "Unknown command: sever\n", false},
		{[]string{"--port"}, 2, "", "Unknown command: --port\n", false},
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

// TestReadmeListsEveryFile checks that README's Architecture table names
// every production .go file exactly once, one per row, and no file that
// does not exist, so that the layout it describes stays the real one.
func TestReadmeListsEveryFile(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Architecture\n")
	if !ok {
		t.Fatal("README has no Architecture section")
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
				t.Errorf("README Architecture lists %s %d times; want once, in a row of its own", f, listed[f])
			}
		}
	}
	for name := range listed {
		if !production[name] {
			t.Errorf("README Architecture lists %s; want only production files that exist", name)
		}
	}
}
