package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// isSubsequence reports whether every byte of a appears in b in order: an
// edit that only inserts keeps the old text a subsequence of the new.
func isSubsequence(a, b string) bool {
	j := 0
	for i := 0; i < len(b) && j < len(a); i++ {
		if a[j] == b[i] {
			j++
		}
	}
	return j == len(a)
}

// crosstalkCommands lists the hook commands of ours in settings text.
func crosstalkCommands(t *testing.T, h hookSettings, text string) []string {
	t.Helper()
	root, err := parseJSONSpans(text)
	if err != nil {
		t.Fatalf("not JSON after the edit: %v\n%s", err, text)
	}
	var cmds []string
	if hooks := root.member("hooks"); hooks != nil {
		for i, arr := range hooks.vals {
			for _, item := range arr.vals {
				for _, handler := range handlersOf(h, item) {
					if c := handler.member("command"); c != nil && h.isCrosstalkCommand(c.str) {
						cmds = append(cmds, hooks.keys[i]+" "+c.str)
					}
				}
			}
		}
	}
	return cmds
}

// TestHooksInstallEveryClient installs into a missing file, again (no
// change), moves the binary (stale entries replaced), and uninstalls.
func TestHooksInstallEveryClient(t *testing.T) {
	for _, name := range hookClientNames() {
		t.Run(name, func(t *testing.T) {
			h := hookInstallTargets[name]
			text, err := installHooks(h, "", "/opt/bin/crosstalk-mcp")
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(text), &v); err != nil {
				t.Fatalf("not strict JSON: %v\n%s", err, text)
			}
			if h.cursor && v["version"] != float64(1) {
				t.Errorf("cursor file without version 1:\n%s", text)
			}
			if got := crosstalkCommands(t, h, text); len(got) != len(h.entries) {
				t.Fatalf("got %d commands %v; want %d", len(got), got, len(h.entries))
			}
			again, err := installHooks(h, text, "/opt/bin/crosstalk-mcp")
			if err != nil || again != text {
				t.Errorf("second install changed the file (%v):\n%s", err, again)
			}
			moved, err := installHooks(h, text, "/usr/local/bin/crosstalk-mcp")
			if err != nil {
				t.Fatal(err)
			}
			got := crosstalkCommands(t, h, moved)
			if len(got) != len(h.entries) || strings.Contains(moved, "/opt/bin") {
				t.Errorf("after a move: %v; want %d commands, all at the new path", got, len(h.entries))
			}
			removed, err := removeHooks(h, moved, func(string) bool { return true })
			if err != nil || len(crosstalkCommands(t, h, removed)) != 0 {
				t.Errorf("uninstall left %v (%v)", crosstalkCommands(t, h, removed), err)
			}
		})
	}
}

// TestHooksInstallKeepsUserSettings checks that a user's own settings,
// hooks, spacing and comments survive install and uninstall.
func TestHooksInstallKeepsUserSettings(t *testing.T) {
	const original = `{
    // my settings
    "permissions": {"allow": ["Bash(go test:*)"]},
    "hooks": {
        "Stop": [
            {"matcher": "", "hooks": [{"type": "command", "command": "notify-send done"}]}
        ],
        "PreToolUse": []
    },
    "model": "opus"
}
`
	h := hookInstallTargets["claude-code"]
	text, err := installHooks(h, original, "/opt/bin/crosstalk-mcp")
	if err != nil {
		t.Fatal(err)
	}
	if !isSubsequence(original, text) {
		t.Fatalf("install changed existing bytes:\n%s", text)
	}
	if !strings.Contains(text, "\n        \"SessionStart\": [\n            {\n                \"hooks\": [") {
		t.Errorf("new entries not indented like the file:\n%s", text)
	}
	if n := len(crosstalkCommands(t, h, text)); n != len(h.entries) {
		t.Errorf("%d commands installed; want %d", n, len(h.entries))
	}
	removed, err := removeHooks(h, text, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []string{"// my settings", `"notify-send done"`, `"model": "opus"`, `"allow": ["Bash(go test:*)"]`} {
		if !strings.Contains(removed, keep) {
			t.Errorf("uninstall lost %s:\n%s", keep, removed)
		}
	}
	if !isSubsequence(removed, text) {
		t.Errorf("uninstall touched bytes it had not added:\n%s", removed)
	}
}

// TestHooksCommandLine runs `hooks install` for a project with --dry-run
// (nothing written), for real (backup kept), and `hooks uninstall`.
func TestHooksCommandLine(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	path := filepath.Join(dir, ".cursor", "hooks.json")
	var out, errOut strings.Builder
	if code := run([]string{"hooks", "install", "--client", "cursor", "--scope", "project", "--dry-run"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut.String())
	}
	if _, err := os.Stat(path); err == nil || !strings.Contains(out.String(), `+      "followup_message"`) && !strings.Contains(out.String(), "+") {
		t.Fatalf("dry run wrote the file or printed no change: %q", out.String())
	}
	original := "{\n  \"version\": 1,\n  \"hooks\": {\"afterFileEdit\": [{\"command\": \"fmt.sh\"}]}\n}\n"
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, []byte(original), 0o600)
	out.Reset()
	if code := run([]string{"hooks", "install", "--client", "cursor", "--scope", "project"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("install: exit %d: %s", code, errOut.String())
	}
	backup, _ := os.ReadFile(path + ".crosstalk-backup")
	installed, _ := os.ReadFile(path)
	info, _ := os.Stat(path)
	if string(backup) != original || !strings.Contains(string(installed), "hook --client cursor") || info.Mode().Perm() != 0o600 {
		t.Errorf("backup %q, installed %q, mode %v", backup, installed, info.Mode().Perm())
	}
	if code := run([]string{"hooks", "uninstall", "--client", "cursor", "--scope", "project"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("uninstall: exit %d: %s", code, errOut.String())
	}
	if after, _ := os.ReadFile(path); strings.Contains(string(after), "crosstalk") || !strings.Contains(string(after), "fmt.sh") {
		t.Errorf("after uninstall: %s", after)
	}
	if code := run([]string{"hooks", "install", "--client", "vscode", "--scope", "user"}, nil, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "no user scope") {
		t.Errorf("vscode user scope: exit %d, %q; want a refusal", code, errOut.String())
	}
}
