package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runCLI runs the command line args and returns its exit status and output.
func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestTokensAddList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	code, token, stderr := runCLI("tokens", "add", "alice", "--context-id", "alice", "--context-id", "ci-*", "--tokens-file", path)
	token = strings.TrimSpace(token)
	if code != 0 || len(token) != 43 || stderr != "" {
		t.Fatalf("add: got %d, %q, %q; want 0, a 43-character token, nothing", code, token, stderr)
	}
	if code, _, _ := runCLI("tokens", "add", "bob", "--context-id", "bob", "--tokens-file", path); code != 0 {
		t.Fatalf("second add: got %d; want 0", code)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("tokens file: got %v, %v; want mode 0600", info, err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), token) {
		t.Errorf("tokens file holds the token:\n%s", data)
	}
	tokens, err := newTokenTable("", path)
	if err != nil {
		t.Fatal(err)
	}
	if tok := tokens.authenticate("Bearer " + token); tok == nil || tok.name != "alice" {
		t.Errorf("the printed token: got %v; want alice's", tok)
	}
	code, list, _ := runCLI("tokens", "list", "--tokens-file", path)
	if want := "alice alice ci-*\nbob bob\n"; code != 0 || list != want {
		t.Errorf("list: got %d, %q; want 0, %q", code, list, want)
	}
	if strings.Contains(list, "sha256") || strings.Contains(list, token) {
		t.Errorf("list shows a token or digest: %q", list)
	}
	tests := []struct {
		args []string
		code int
		want string // in stderr, or stdout for --help
	}{
		{[]string{"add", "alice", "--context-id", "a", "--tokens-file", path}, 1, "alice repeats an earlier line's NAME"},
		{[]string{"add", "carol", "--context-id", "a b", "--tokens-file", path}, 1, "without blanks"},
		{[]string{"add", "carol", "--context-id", "a*b", "--tokens-file", path}, 1, "only at its end"},
		{[]string{"add", "carol", "--tokens-file", path}, 2, "at least one --context-id"},
		{[]string{"add", "--context-id", "a", "--tokens-file", path}, 2, "add needs NAME"},
		{[]string{"add", "carol", "--context-id", "a"}, 2, "--tokens-file is required"},
		{[]string{"remove"}, 2, "expected add or list"},
		{[]string{"--help"}, 0, "usage: crosstalk-mcp tokens add"},
		{[]string{"add", "--help"}, 0, "usage: crosstalk-mcp tokens add"},
		{[]string{"list", "-h"}, 0, "usage: crosstalk-mcp tokens add"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(append([]string{"tokens"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stdout+stderr, tt.want) {
				t.Errorf("got %d, %q, %q; want %d and %q", code, stdout, stderr, tt.code, tt.want)
			}
		})
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Errorf("refused adds changed the file:\n%s", after)
	}
}
