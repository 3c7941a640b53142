package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	if hooks := root.member(h.section); hooks != nil {
		for i, arr := range hooks.vals {
			for _, item := range arr.vals {
				for _, handler := range handlersOf(h, item) {
					if c := handler.member("command"); c != nil && h.isCrosstalkCommand(c.str) {
						cmds = append(cmds, hooks.keys[i].str+" "+c.str)
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
			text, err := installHooks(h, "", hookLauncher{exe: "/opt/bin/crosstalk-mcp"})
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
			again, err := installHooks(h, text, hookLauncher{exe: "/opt/bin/crosstalk-mcp"})
			if err != nil || again != text {
				t.Errorf("second install changed the file (%v):\n%s", err, again)
			}
			moved, err := installHooks(h, text, hookLauncher{exe: "/usr/local/bin/crosstalk-mcp"})
			if err != nil {
				t.Fatal(err)
			}
			got := crosstalkCommands(t, h, moved)
			if len(got) != len(h.entries) || strings.Contains(moved, "/opt/bin") {
				t.Errorf("after a move: %v; want %d commands, all at the new path", got, len(h.entries))
			}
			removed, err := removeHooks(h, moved, dropAll, dropAll)
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
	text, err := installHooks(h, original, hookLauncher{exe: "/opt/bin/crosstalk-mcp"})
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
	removed, err := removeHooks(h, text, dropAll, dropAll)
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
}

// TestHooksInstallPaths checks the user-scope files of VS Code and
// Antigravity CLI and what goes in them: no waiter for VS Code, which has
// no asyncRewake, and a named suite with --event for Antigravity.
func TestHooksInstallPaths(t *testing.T) {
	for _, tc := range []struct{ client, file, want, never string }{
		{"vscode", ".copilot/hooks/crosstalk.json", `"Stop": [`, "wait --client"},
		{"antigravity", ".gemini/config/hooks.json", `"crosstalk": {` + "\n" + `    "PreInvocation": [` + "\n" + `      {` + "\n" +
			`        "command": "/bin/ct hook --client antigravity --event PreInvocation",` + "\n" + `        "timeout": 10,`, "UserPromptSubmit"},
	} {
		t.Run(tc.client, func(t *testing.T) {
			home := t.TempDir()
			h := hookInstallTargets[tc.client]
			if got := h.settingsPath("user", home, "/p"); got != filepath.Join(home, filepath.FromSlash(tc.file)) {
				t.Errorf("user file %s; want ~/%s", got, tc.file)
			}
			text, err := installHooks(h, "", hookLauncher{exe: "/bin/ct"})
			if err != nil || !strings.Contains(text, tc.want) || strings.Contains(text, tc.never) || strings.Contains(text, "asyncRewake") {
				t.Errorf("installed (%v):\n%s\nwant %q, never %q", err, text, tc.want, tc.never)
			}
		})
	}
}

// hooksCLI runs `crosstalk-mcp hooks VERB --client CLIENT --scope project`
// in the current directory and returns its exit status and output.
func hooksCLI(verb, client string) (int, string) {
	var out strings.Builder
	code := run([]string{"hooks", verb, "--client", client, "--scope", "project"}, nil, &out, &out)
	return code, out.String()
}

// readOrMissing returns a file's content, or "(missing)" when it does not exist.
func readOrMissing(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "(missing)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// oddSettings is a settings file with a byte order mark, tabs, comments,
// trailing commas, escapes Go's strconv cannot read, one hook of the user's
// at the event h's last entry uses and an empty array of another event.
func oddSettings(h hookSettings) string {
	handler := `{"type": "command", "command": "say \"done\" \/ \ud83d\ude00"}`
	if h.cursor {
		handler = `{"command": "say \"done\" \/ \ud83d\ude00"}`
	}
	if h.grouped {
		handler = `{"matcher": "", "hooks": [` + handler + `]}`
	}
	return "\ufeff{\n\t// mine\n\t\"model\" : \"opus\",\n\t\"" + h.section + "\": {\n\t\t\"Other\": [ ],\n\t\t\"" +
		h.entries[len(h.entries)-1].event + "\": [\n\t\t\t" + handler + ",\n\t\t],\n\t},\n}\n"
}

// TestHooksUninstallRestoresBytes checks, for every client, that install
// then uninstall leaves the settings file byte for byte as it was (or
// missing again), and that a change the user made in between survives an
// uninstall that removes only Crosstalk's entries.
func TestHooksUninstallRestoresBytes(t *testing.T) {
	for _, name := range hookClientNames() {
		h := hookInstallTargets[name]
		for _, tc := range []struct{ name, original string }{
			{"missing", "(missing)"}, {"empty object", "{}"}, {"empty object and newline", "{ }\n"}, {"odd", oddSettings(h)},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				t.Chdir(t.TempDir())
				path := filepath.FromSlash(h.project)
				os.MkdirAll(filepath.Dir(path), 0o755)
				if tc.original != "(missing)" {
					os.WriteFile(path, []byte(tc.original), 0o644)
				}
				if code, out := hooksCLI("install", name); code != 0 || len(crosstalkCommands(t, h, readOrMissing(t, path))) != len(h.entries) {
					t.Fatalf("install: exit %d (%s):\n%s", code, out, readOrMissing(t, path))
				}
				if code, out := hooksCLI("uninstall", name); code != 0 || readOrMissing(t, path) != tc.original {
					t.Errorf("uninstall: exit %d (%s); got\n%q\nwant\n%q", code, out, readOrMissing(t, path), tc.original)
				}
				// A second install, after the binary moved, rewrites the file;
				// uninstall still restores the bytes from before the first.
				hooksCLI("install", name)
				exe, _ := os.Executable()
				os.WriteFile(path, []byte(strings.ReplaceAll(readOrMissing(t, path), exe, exe+"-moved")), 0o644)
				if code, out := hooksCLI("install", name); code != 0 || strings.Contains(readOrMissing(t, path), exe+"-moved") {
					t.Fatalf("install over a moved binary: exit %d (%s):\n%s", code, out, readOrMissing(t, path))
				}
				if code, out := hooksCLI("uninstall", name); code != 0 || readOrMissing(t, path) != tc.original {
					t.Errorf("uninstall after two installs: exit %d (%s); got\n%q\nwant\n%q", code, out, readOrMissing(t, path), tc.original)
				}
				if tc.original == "(missing)" {
					return
				}
				// The user changes something else between install and uninstall.
				hooksCLI("install", name)
				installed := readOrMissing(t, path)
				open := strings.IndexByte(installed, '{') + 1
				changed := installed[:open] + `"theme": "dark",` + installed[open:]
				os.WriteFile(path, []byte(changed), 0o644)
				code, out := hooksCLI("uninstall", name)
				got := readOrMissing(t, path)
				if code != 0 || len(crosstalkCommands(t, h, got)) != 0 || !strings.Contains(got, `"theme": "dark"`) ||
					!isSubsequence(got, changed) || !isSubsequence(tc.original, got) {
					t.Errorf("uninstall after a change: exit %d (%s); got\n%q; want %q with only our entries gone", code, out, got, changed)
				}
				if want := tc.original[:open] + `"theme": "dark",` + tc.original[open:]; tc.name == "odd" && got != want {
					t.Errorf("uninstall after a change: got\n%q\nwant\n%q", got, want)
				}
			})
		}
	}
}

// TestHooksKeepAConcurrentEdit writes settings that changed since they
// were read: the write is refused and the other edit stays.
func TestHooksKeepAConcurrentEdit(t *testing.T) {
	for _, tc := range []struct {
		name, now string // now is "" for a missing file
		old       string
		existed   bool
	}{
		{"edited", "{\"theme\": \"dark\"}\n", "{}\n", true},
		{"created", "{\"theme\": \"dark\"}\n", "", false},
		{"removed", "", "{}\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "settings.json")
			if tc.now != "" {
				os.WriteFile(path, []byte(tc.now), 0o644)
			}
			err := writeSettings(path, 0o644, []byte(tc.old), tc.existed, "{\"hooks\": {}}\n")
			if err == nil || !strings.Contains(err.Error(), "changed while") {
				t.Errorf("got %v; want the edit refused", err)
			}
			if got := readOrMissing(t, path); got != cmp.Or(tc.now, "(missing)") {
				t.Errorf("settings after the refusal: got %q; want %q", got, tc.now)
			}
		})
	}
}

// TestParseJSONSpansEscapes checks that the editor reads every JSON string
// escape and a byte order mark.
func TestParseJSONSpansEscapes(t *testing.T) {
	root, err := parseJSONSpans("\ufeff{\"a\\/b\": \"\\ud83d\\ude00 \\u00e9\\b\\f\\n\\r\\t\\\"\\\\\"}")
	if err != nil {
		t.Fatal(err)
	}
	if got := root.member("a/b"); got == nil || got.str != "😀 é\b\f\n\r\t\"\\" {
		t.Errorf("got %+v; want the member a/b decoded", got)
	}
}

// TestHooksInstallWritesNoLinkItDidNotChoose checks the symbolic-link and
// permission rules: a link planted at the backup's name is replaced, never
// followed; a settings file that is a link is written at its target, which
// uninstall restores; a link to nothing and a read-only file are refused.
func TestHooksInstallWritesNoLinkItDidNotChoose(t *testing.T) {
	const original = "{\"model\": \"opus\"}\n"
	setup := func(t *testing.T) (path, elsewhere string) {
		dir := t.TempDir()
		t.Chdir(dir)
		path = filepath.Join(dir, ".claude", "settings.json")
		os.MkdirAll(filepath.Dir(path), 0o755)
		elsewhere = filepath.Join(t.TempDir(), "elsewhere.json")
		os.WriteFile(elsewhere, []byte(original), 0o644)
		return path, elsewhere
	}
	t.Run("planted backup link", func(t *testing.T) {
		path, victim := setup(t)
		os.WriteFile(path, []byte(original), 0o644)
		os.Symlink(victim, path+backupSuffix)
		if code, out := hooksCLI("install", "claude-code"); code != 0 {
			t.Fatalf("install: exit %d: %s", code, out)
		}
		info, err := os.Lstat(path + backupSuffix)
		if readOrMissing(t, victim) != original || err != nil || !info.Mode().IsRegular() || readOrMissing(t, path+backupSuffix) != original {
			t.Errorf("link target %q, backup %v (%v); want the target untouched and a regular backup", readOrMissing(t, victim), info, err)
		}
	})
	t.Run("settings file is a link", func(t *testing.T) {
		path, target := setup(t)
		os.Symlink(target, path)
		if code, out := hooksCLI("install", "claude-code"); code != 0 || !strings.Contains(readOrMissing(t, target), "hook --client claude-code") {
			t.Fatalf("install: exit %d: %s; target %s", code, out, readOrMissing(t, target))
		}
		if code, out := hooksCLI("uninstall", "claude-code"); code != 0 || readOrMissing(t, target) != original {
			t.Errorf("uninstall: exit %d: %s; target %q; want %q", code, out, readOrMissing(t, target), original)
		}
		if info, err := os.Lstat(path); err != nil || info.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the link is gone or replaced: %v, %v", info, err)
		}
	})
	t.Run("link to nothing", func(t *testing.T) {
		path, _ := setup(t)
		missing := filepath.Join(t.TempDir(), "missing.json")
		os.Symlink(missing, path)
		if code, out := hooksCLI("install", "claude-code"); code != 1 || !strings.Contains(out, "symbolic link to a missing file") ||
			readOrMissing(t, missing) != "(missing)" {
			t.Errorf("install: exit %d: %s; want a refusal", code, out)
		}
	})
	t.Run("read-only file", func(t *testing.T) {
		path, _ := setup(t)
		os.WriteFile(path, []byte(original), 0o444)
		code, out := hooksCLI("install", "claude-code")
		info, _ := os.Stat(path)
		if code != 1 || !strings.Contains(out, "read-only") || readOrMissing(t, path) != original || info.Mode().Perm() != 0o444 {
			t.Errorf("install: exit %d: %s; file %q mode %v; want a refusal and the file untouched", code, out, readOrMissing(t, path), info.Mode())
		}
	})
}

// TestHooksGroupsDir checks where `hooks install` takes the groups
// directory it records from: --groups-dir, CROSSTALK_GROUPS_DIR, then the
// client's MCP configuration in the order the client reads it.
func TestHooksGroupsDir(t *testing.T) {
	server := func(dir string) string {
		return `{"command": "crosstalk-mcp", "env": {"CROSSTALK_GROUPS_DIR": "` + dir + `"}}`
	}
	for _, tc := range []struct {
		name, flag, env, client string
		files                   map[string]string // relative to home ("~/") or the project
		want                    string
	}{
		{"flag first", "/flag", "/env", "claude-code", map[string]string{".mcp.json": `{"mcpServers": {"ct": ` + server("/mcp") + `}}`}, "/flag"},
		{"then the environment", "", "/env", "claude-code", map[string]string{".mcp.json": `{"mcpServers": {"ct": ` + server("/mcp") + `}}`}, "/env"},
		{"local scope before project", "", "", "claude-code", map[string]string{
			".mcp.json":      `{"mcpServers": {"ct": ` + server("/project") + `}}`,
			"~/.claude.json": `{"mcpServers": {"ct": ` + server("/user") + `}, "projects": {PROJECT: {"mcpServers": {"ct": ` + server("/local") + `}}}}`}, "/local"},
		{"user scope last", "", "", "claude-code", map[string]string{"~/.claude.json": `{"mcpServers": {"other": {"command": "x"}, "ct": ` + server("/user") + `}}`}, "/user"},
		{"variables expanded", "", "", "cursor", map[string]string{".cursor/mcp.json": `{"mcpServers": {"ct": ` + server("${NO_SUCH_VAR_X:-/fallback}/g") + `}}`}, "/fallback/g"},
		{"vscode servers", "", "", "vscode", map[string]string{".vscode/mcp.json": `{"servers": {"ct": ` + server("/vs") + `}}`}, "/vs"},
		{"none", "", "", "gemini", map[string]string{".gemini/settings.json": `{not json`}, ""},
		{"antigravity workspace", "", "", "antigravity", map[string]string{".agents/mcp_config.json": `{"mcpServers": {"ct": ` + server("/agy") + `}}`,
			"~/.gemini/config/mcp_config.json": `{"mcpServers": {"ct": ` + server("/global") + `}}`}, "/agy"},
		{"antigravity global", "", "", "antigravity", map[string]string{"~/.gemini/antigravity-cli/mcp_config.json": `{"mcpServers": {"ct": ` + server("/cli") + `}}`}, "/cli"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home, project := t.TempDir(), t.TempDir()
			t.Setenv("CROSSTALK_GROUPS_DIR", tc.env)
			for name, text := range tc.files {
				path := filepath.Join(project, name)
				if rel, ok := strings.CutPrefix(name, "~/"); ok {
					path = filepath.Join(home, rel)
				}
				os.MkdirAll(filepath.Dir(path), 0o755)
				os.WriteFile(path, []byte(strings.ReplaceAll(text, "PROJECT", strings.TrimSpace(jsonLine(project)))), 0o644)
			}
			c := hooksInstallCommand{target: hookInstallTargets[tc.client], groupsDir: tc.flag}
			var out strings.Builder
			got, err := c.hooksGroupsDir(&out, home, project)
			if err != nil || got != tc.want || !strings.Contains(out.String(), tc.want) {
				t.Errorf("got %q (%v), said %q; want %q", got, err, out.String(), tc.want)
			}
		})
	}
}

// TestHooksGroupsDirMissingIsNoted checks that install says when the
// groups directory it records does not exist, as after an unexpanded "~".
func TestHooksGroupsDirMissingIsNoted(t *testing.T) {
	home, project := t.TempDir(), t.TempDir()
	t.Chdir(project)
	for _, tc := range []struct {
		flag string
		note bool
	}{
		{"~/groups", true},
		{home, false},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			var out strings.Builder
			c := hooksInstallCommand{target: hookInstallTargets["claude-code"], groupsDir: tc.flag}
			if _, err := c.hooksGroupsDir(&out, home, project); err != nil || strings.Contains(out.String(), "does not exist yet") != tc.note {
				t.Errorf("said %q (%v); want the note about a missing directory %v", out.String(), err, tc.note)
			}
		})
	}
}

// TestHooksUninstallThroughALinkedDirectory keeps the client's settings
// directory as a link to elsewhere (dotfiles): uninstall still removes the
// file install created there, leaving it missing as it was.
func TestHooksUninstallThroughALinkedDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	dotfiles := t.TempDir()
	if err := os.Symlink(dotfiles, ".claude"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dotfiles, "settings.json")
	if code, out := hooksCLI("install", "claude-code"); code != 0 || readOrMissing(t, path) == "(missing)" {
		t.Fatalf("install: exit %d: %s", code, out)
	}
	if code, out := hooksCLI("uninstall", "claude-code"); code != 0 || readOrMissing(t, path) != "(missing)" {
		t.Errorf("uninstall: exit %d: %s; file %q; want it missing again", code, out, readOrMissing(t, path))
	}
}

// TestHooksUninstallRestoresABlankFile installs into a settings file that
// holds only whitespace: uninstall puts those bytes back, not removing it.
func TestHooksUninstallRestoresABlankFile(t *testing.T) {
	for _, original := range []string{"", "\n", " \r\n"} {
		t.Run(strings.TrimSpace(jsonLine(original)), func(t *testing.T) {
			t.Chdir(t.TempDir())
			path := filepath.Join(".claude", "settings.json")
			os.MkdirAll(".claude", 0o755)
			os.WriteFile(path, []byte(original), 0o644)
			if code, out := hooksCLI("install", "claude-code"); code != 0 {
				t.Fatalf("install: exit %d: %s", code, out)
			}
			if code, out := hooksCLI("uninstall", "claude-code"); code != 0 || readOrMissing(t, path) != original {
				t.Errorf("uninstall: exit %d: %s; file %q; want %q", code, out, readOrMissing(t, path), original)
			}
		})
	}
}

// TestHooksInstallNamesTheLinkOnPath runs hooks install through the link a
// package manager puts on PATH (Homebrew, Nix): the hooks must name that
// link, which an upgrade keeps, not the versioned file behind it; a binary
// run from elsewhere, not on PATH, names itself.
func TestHooksInstallNamesTheLinkOnPath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("os.Executable resolves links on Linux; elsewhere it names the link run")
	}
	tmp := t.TempDir()
	versioned := filepath.Join(tmp, "cellar", "1.2.3", "crosstalk-mcp")
	link := filepath.Join(tmp, "bin", "crosstalk-mcp")
	os.MkdirAll(filepath.Dir(versioned), 0o755)
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Link(builtBinary(t), versioned); err != nil { // a hard link: the same file, a path of its own
		t.Fatal(err)
	}
	if err := os.Symlink(versioned, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, path, want string }{
		{"run through the link on PATH", "PATH=" + filepath.Dir(link), link},
		{"not on PATH", "PATH=" + t.TempDir(), versioned},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			cmd := exec.Command(link, "hooks", "install", "--client", "claude-code", "--groups-dir", filepath.Join(home, "groups"))
			cmd.Env = append(os.Environ(), "HOME="+home, "CLAUDE_CONFIG_DIR=", tt.path)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("hooks install: %v\n%s", err, out)
			}
			settings := readOrMissing(t, filepath.Join(home, ".claude", "settings.json"))
			if !strings.Contains(settings, tt.want+" hook") && !strings.Contains(settings, tt.want+"' hook") {
				t.Errorf("settings name the binary as:\n%s\nwant %s", settings, tt.want)
			}
		})
	}
}

// TestHooksInstallKeepsCommentsInEmptyContainers installs into a file, a
// section and an event array that hold only a comment: the comment stays.
func TestHooksInstallKeepsCommentsInEmptyContainers(t *testing.T) {
	h := hookInstallTargets["claude-code"]
	for name, original := range map[string]string{
		"file":    "{\n  // my settings go here\n}\n",
		"section": "{\n  \"hooks\": {\n    // add hooks below\n  }\n}\n",
		"array":   "{\n  \"hooks\": {\n    \"Stop\": [ /* none yet */ ]\n  }\n}\n",
	} {
		t.Run(name, func(t *testing.T) {
			text, err := installHooks(h, original, hookLauncher{exe: "/opt/bin/crosstalk-mcp"})
			if err != nil {
				t.Fatal(err)
			}
			if !isSubsequence(original, text) {
				t.Errorf("got\n%s\nwant every byte of\n%s", text, original)
			}
			if n := len(crosstalkCommands(t, h, text)); n != len(h.entries) {
				t.Errorf("got %d commands; want %d", n, len(h.entries))
			}
		})
	}
}

// TestHooksUninstallKeepsWhatTheUserHad edits the settings between install
// and uninstall: the section and event arrays the user had before install
// stay, even empty; only what install added goes.
func TestHooksUninstallKeepsWhatTheUserHad(t *testing.T) {
	for _, name := range hookClientNames() {
		h := hookInstallTargets[name]
		ev := h.entries[0].event
		for _, tc := range []struct{ name, original string }{
			{"empty section", `{"` + h.section + `": {}}`},
			{"empty event array", `{"` + h.section + `": {"` + ev + `": []}}`},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				t.Chdir(t.TempDir())
				path := filepath.FromSlash(h.project)
				os.MkdirAll(filepath.Dir(path), 0o755)
				os.WriteFile(path, []byte(tc.original), 0o644)
				if code, out := hooksCLI("install", name); code != 0 {
					t.Fatalf("install: exit %d (%s)", code, out)
				}
				installed := readOrMissing(t, path)
				os.WriteFile(path, []byte(`{"theme": "dark",`+installed[1:]), 0o644)
				code, out := hooksCLI("uninstall", name)
				if got, want := readOrMissing(t, path), `{"theme": "dark",`+tc.original[1:]; code != 0 || got != want {
					t.Errorf("uninstall: exit %d (%s); got\n%q\nwant\n%q", code, out, got, want)
				}
			})
		}
	}
}
