package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHooksGroupsDirExpandsClientVariables reads a groups directory that a
// client's MCP configuration gives with that client's variables: VS Code's
// and Cursor's ${workspaceFolder}, ${userHome} and ${env:VAR}, Claude
// Code's ${VAR:-default}. Expanded as blanks, the hooks would read a
// directory no server uses, and stay silent.
func TestHooksGroupsDirExpandsClientVariables(t *testing.T) {
	home, project := t.TempDir(), t.TempDir()
	t.Setenv("CROSSTALK_GROUPS_DIR", "")
	t.Setenv("CT_TEST_GROUPS", "/from/env")
	for _, tc := range []struct{ client, file, servers, value, want string }{
		{"vscode", ".vscode/mcp.json", "servers", "${workspaceFolder}/.crosstalk", filepath.Join(project, ".crosstalk")},
		{"cursor", ".cursor/mcp.json", "mcpServers", "${userHome}/groups", filepath.Join(home, "groups")},
		{"cursor", ".cursor/mcp.json", "mcpServers", "${env:CT_TEST_GROUPS}/g", "/from/env/g"},
		{"claude-code", ".mcp.json", "mcpServers", "${CT_TEST_UNSET:-/default}/g", "/default/g"},
	} {
		t.Run(tc.client+" "+tc.value, func(t *testing.T) {
			path := filepath.Join(project, filepath.FromSlash(tc.file))
			os.MkdirAll(filepath.Dir(path), 0o755)
			config := `{"` + tc.servers + `": {"ct": {"command": "crosstalk-mcp", "env": {"CROSSTALK_GROUPS_DIR": "` + tc.value + `"}}}}`
			if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
				t.Fatal(err)
			}
			c := hooksInstallCommand{target: hookInstallTargets[tc.client]}
			if got, err := c.hooksGroupsDir(io.Discard, home, project); err != nil || got != tc.want {
				t.Errorf("got %q (%v); want %q", got, err, tc.want)
			}
		})
	}
}

// TestHooksInstallKeepsWindowsLineEnds installs into settings files whose
// lines end in CRLF, as Windows editors write them: the lines added end so
// too, rather than leaving the file with two kinds of line ends.
func TestHooksInstallKeepsWindowsLineEnds(t *testing.T) {
	for _, name := range hookClientNames() {
		h := hookInstallTargets[name]
		for _, original := range []string{"{}\r\n", "{\r\n  \"model\": \"opus\"\r\n}\r\n", strings.ReplaceAll(oddSettings(h), "\n", "\r\n")} {
			t.Run(name+" "+strings.TrimSpace(jsonLine(original)), func(t *testing.T) {
				text, err := installHooks(h, original, hookLauncher{exe: "/opt/bin/crosstalk-mcp"})
				if err != nil {
					t.Fatal(err)
				}
				if lf, crlf := strings.Count(text, "\n"), strings.Count(text, "\r\n"); lf != crlf {
					t.Errorf("got %d line ends, %d of them CRLF; want all CRLF:\n%q", lf, crlf, text)
				}
			})
		}
	}
}

// TestShellQuoteIsVerbatim passes paths through the POSIX shell that runs
// hook commands (Git Bash, for Claude Code on Windows): each must arrive as
// written. An unquoted backslash is an escape there, and a Windows path
// C:\Users\... arrived as C:Users...: every hook failed to start.
func TestShellQuoteIsVerbatim(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, path := range []string{"/opt/bin/crosstalk-mcp", `C:\Users\me\bin\crosstalk-mcp.exe`, "C:/Users/me/bin/crosstalk-mcp.exe",
		"/opt/my tools/crosstalk-mcp", "/home/o'brien/$HOME/*", `/a\b`, ""} {
		t.Run(path, func(t *testing.T) {
			out, err := exec.Command(sh, "-c", "printf %s "+shellQuote(path)).Output()
			if got := string(out); err != nil || got != path {
				t.Errorf("sh read %s as %q (%v); want %q", shellQuote(path), got, err, path)
			}
		})
	}
}

// TestHooksGroupsDirReadsCommentedConfiguration reads the groups directory
// from MCP configurations with comments and trailing commas, as VS Code
// reads its mcp.json (its documentation's examples carry comments): passed
// over, the hooks would read the default directory, not the server's.
func TestHooksGroupsDirReadsCommentedConfiguration(t *testing.T) {
	t.Setenv("CROSSTALK_GROUPS_DIR", "")
	for _, tc := range []struct{ client, file, config string }{
		{"vscode", ".vscode/mcp.json", "{\n  // crosstalk\n  \"servers\": {\n    \"ct\": {\"command\": \"crosstalk-mcp\", \"env\": {\"CROSSTALK_GROUPS_DIR\": \"/shared/groups\"},},\n  },\n}\n"},
		{"cursor", ".cursor/mcp.json", "{\"mcpServers\": {/* ours */ \"ct\": {\"env\": {\"CROSSTALK_GROUPS_DIR\": \"/shared/groups\"}}}}"},
	} {
		t.Run(tc.client, func(t *testing.T) {
			home, project := t.TempDir(), t.TempDir()
			path := filepath.Join(project, filepath.FromSlash(tc.file))
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			c := hooksInstallCommand{target: hookInstallTargets[tc.client]}
			if got, err := c.hooksGroupsDir(io.Discard, home, project); err != nil || got != "/shared/groups" {
				t.Errorf("got %q (%v); want /shared/groups", got, err)
			}
		})
	}
}

// TestHooksInstallFollowsConfigDirVariable installs into the directory
// that CODEX_HOME or CLAUDE_CONFIG_DIR names when set, as the client then
// reads its hooks there only: the file below home would never run.
func TestHooksInstallFollowsConfigDirVariable(t *testing.T) {
	for _, tc := range []struct{ client, variable, file string }{
		{"codex", "CODEX_HOME", "hooks.json"},
		{"claude-code", "CLAUDE_CONFIG_DIR", "settings.json"},
	} {
		t.Run(tc.client, func(t *testing.T) {
			home, dir := t.TempDir(), t.TempDir()
			t.Setenv(tc.variable, dir)
			h := hookInstallTargets[tc.client]
			if got, want := h.settingsPath("user", home, "/p"), filepath.Join(dir, tc.file); got != want {
				t.Errorf("got %s; want %s", got, want)
			}
			if got, want := h.settingsPath("project", home, "/p"), filepath.Join("/p", filepath.Dir(filepath.FromSlash(h.user)), tc.file); got != want {
				t.Errorf("project scope: got %s; want %s", got, want)
			}
			if tc.client != "claude-code" {
				return
			}
			// Claude Code keeps its MCP configuration there too.
			config := `{"mcpServers": {"ct": {"command": "crosstalk-mcp", "env": {"CROSSTALK_GROUPS_DIR": "/shared/groups"}}}}`
			if err := os.WriteFile(filepath.Join(dir, ".claude.json"), []byte(config), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("CROSSTALK_GROUPS_DIR", "")
			c := hooksInstallCommand{target: h}
			if got, err := c.hooksGroupsDir(io.Discard, home, "/p"); err != nil || got != "/shared/groups" {
				t.Errorf("groups directory: got %q (%v); want /shared/groups", got, err)
			}
		})
	}
}

// TestHooksGroupsDirSaysCodexConfigIsNotRead installs Codex's hooks with
// the groups directory only in ~/.codex/config.toml, as the README's Codex
// set-up has it: the note must not claim the configuration was searched,
// or the hooks silently read the default directory.
func TestHooksGroupsDirSaysCodexConfigIsNotRead(t *testing.T) {
	home := t.TempDir()
	t.Setenv("CROSSTALK_GROUPS_DIR", "")
	os.MkdirAll(filepath.Join(home, ".codex"), 0o755)
	config := "[mcp_servers.crosstalk]\ncommand = \"crosstalk-mcp\"\n\n[mcp_servers.crosstalk.env]\nCROSSTALK_GROUPS_DIR = \"/shared/groups\"\n"
	if err := os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	c := hooksInstallCommand{target: hookInstallTargets["codex"]}
	if got, err := c.hooksGroupsDir(&out, home, t.TempDir()); err != nil || got != "" || !strings.Contains(out.String(), "Codex's TOML is not read") {
		t.Errorf("got %q (%v), said %q; want \"\" and a note that Codex's TOML is not read", got, err, out.String())
	}
}

// TestHooksHelpNamesConfigDirs checks that hooks --help, describing the user
// scope, names every variable that moves a client's user settings file away
// from the home directory.
func TestHooksHelpNamesConfigDirs(t *testing.T) {
	for client, h := range hookInstallTargets {
		if h.dirEnv == "" {
			continue
		}
		t.Run(client, func(t *testing.T) {
			if !strings.Contains(hooksHelp, "$"+h.dirEnv) {
				t.Errorf("got hooks --help without $%s; want the user scope to name it, as install writes there when it is set", h.dirEnv)
			}
		})
	}
}
