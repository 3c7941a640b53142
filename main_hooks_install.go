package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// hooksInstallCommand is one `crosstalk-mcp hooks install|uninstall` run.
type hooksInstallCommand struct {
	install   bool
	target    hookSettings
	scope     string
	dryRun    bool
	groupsDir string // --groups-dir
}

const hooksHelp = `usage: crosstalk-mcp hooks install|uninstall --client NAME [--scope user|project] [--dry-run] [--groups-dir PATH]

Add Crosstalk's hooks to a client's settings file, or remove them, leaving every
other byte as it was; the file as it was before Crosstalk's hooks is kept as
FILE.crosstalk-backup. When nothing else has changed since install, uninstall puts
back the very bytes install found (and removes the file install created).

options:
  --client NAME    antigravity, claude-code, codex, cursor, vscode, or
                   gemini: retired (Gemini CLI, use antigravity)
  --scope SCOPE    user (the default: the file below ~, or $CLAUDE_CONFIG_DIR
                   or $CODEX_HOME) or project (below the current directory)
  --dry-run        print the change without writing it
  --groups-dir PATH
                   the groups directory the hook commands pass on (default:
                   $CROSSTALK_GROUPS_DIR, else the CROSSTALK_GROUPS_DIR of the
                   client's MCP configuration of the server, else none: the
                   hooks then read ~/.cache/crosstalk)
`

// runHooksInstall runs `hooks install|uninstall`, which hooksHelp describes.
func runHooksInstall(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "install" && args[0] != "uninstall") {
		err := errors.New("expected install or uninstall")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			err = flag.ErrHelp
		}
		return commandExit("hooks", hooksHelp, err, stdout, stderr)
	}
	name := "hooks " + args[0]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	client := fs.String("client", "", "")
	scope := fs.String("scope", "user", "")
	dryRun := fs.Bool("dry-run", false, "")
	groupsDir := fs.String("groups-dir", "", "")
	err := parseFlags(fs, args[1:])
	target, ok := hookInstallTargets[*client]
	switch {
	case err != nil:
	case !ok:
		err = fmt.Errorf("--client must be one of %s", strings.Join(hookClientNames(), ", "))
	case *scope != "user" && *scope != "project":
		err = fmt.Errorf("--scope must be user or project, not %q", *scope)
	}
	if err != nil {
		return commandExit(name, hooksHelp, err, stdout, stderr)
	}
	cmd := hooksInstallCommand{install: args[0] == "install", target: target, scope: *scope, dryRun: *dryRun, groupsDir: *groupsDir}
	return commandStatus(name, cmd.run(stdout), stderr)
}

// run edits the settings file the command names with installHooks or
// uninstallHooks and reports what it did on stdout. It is long because it is
// one sequence (read, edit, back up, write, report) that pieces would scatter.
func (c hooksInstallCommand) run(stdout io.Writer) error {
	home, homeErr := os.UserHomeDir()
	cwd, err := os.Getwd()
	if err = cmp.Or(homeErr, err); err != nil {
		return err
	}
	path := c.target.settingsPath(c.scope, home, cwd)
	old, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	text, remove := string(old), false
	if c.install {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary: %w", err)
		}
		l := hookLauncher{exe: linkOnPath(exe)}
		if l.groupsDir, err = c.hooksGroupsDir(stdout, home, cwd); err != nil {
			return err
		}
		if text, err = installHooks(c.target, text, l); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	} else if existed {
		if text, remove, err = uninstallHooks(c.target, text, readBackup(path+backupSuffix)); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if text == string(old) && !remove {
		fmt.Fprintf(stdout, "%s: nothing to change\n", path)
		return nil
	}
	target, mode, err := settingsTarget(path)
	if err != nil {
		return err
	}
	_, linkErr := os.Readlink(path)
	remove = remove && linkErr != nil // a link the user made stays, and so does its file
	switch {
	case c.dryRun && remove:
		fmt.Fprintf(stdout, "%s: would be removed, as only Crosstalk's hooks are in it\n", path)
	case c.dryRun:
		fmt.Fprint(stdout, lineDiff(path, string(old), text))
	case remove:
		if err := settingsUnchanged(path, old, existed); err != nil {
			return err
		}
		if err := os.Remove(path); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Crosstalk hooks removed with %s, which install had created\n", path)
	default:
		// The backup keeps the file as it was before Crosstalk's hooks,
		// which uninstall restores byte for byte: a file that has them
		// already keeps the backup it has.
		backup := ""
		stripped, _ := removeHooks(c.target, string(old), dropAll, dropAll)
		if existed && (stripped == string(old) || readBackup(path+backupSuffix) == nil) {
			backup = path + backupSuffix
			if err := writeBackup(backup, old, mode); err != nil {
				return fmt.Errorf("write backup of %s: %w", path, err)
			}
		}
		if err := writeSettings(target, mode, old, existed, text); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		verb := map[bool]string{true: "installed in", false: "removed from"}[c.install]
		fmt.Fprintf(stdout, "Crosstalk hooks %s %s", verb, path)
		if backup != "" {
			fmt.Fprintf(stdout, " (previous file kept as %s)", backup)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// hooksGroupsDir is the absolute groups directory the installed hook
// commands pass on, or "" for none: --groups-dir, else CROSSTALK_GROUPS_DIR,
// else the server's in the client's MCP configuration, since hooks run in
// the client's environment, not the server's. It says which on stdout.
func (c hooksInstallCommand) hooksGroupsDir(stdout io.Writer, home, cwd string) (string, error) {
	dir, from := c.groupsDir, "--groups-dir"
	if dir == "" {
		dir, from = os.Getenv("CROSSTALK_GROUPS_DIR"), "CROSSTALK_GROUPS_DIR"
	}
	if dir == "" {
		dir, from = mcpGroupsDir(c.target.client, home, cwd)
	}
	if dir == "" {
		fmt.Fprintln(stdout, "No groups directory given or found in the client's JSON MCP configuration (Codex's TOML is not read): the hooks read the default, ~/.cache/crosstalk; pass --groups-dir if the server uses another")
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("groups directory %s: %w", dir, err)
	}
	fmt.Fprintf(stdout, "The hooks read groups directory %s (from %s)\n", abs, from)
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) { // a mistyped path (an unexpanded ~) would leave the hooks silent
		fmt.Fprintf(stdout, "Note: %s does not exist yet: the hooks print nothing until a server using it has started\n", abs)
	}
	return abs, nil
}

// mcpServerList is where a client's MCP configuration lists its servers:
// a JSON file and the keys that lead to the object of server entries.
type mcpServerList struct {
	file string
	keys []string
}

// mcpServerLists are a client's MCP configuration files for the project
// directory cwd, in the order the client lets them override one another;
// Codex's is TOML, which is not read.
func mcpServerLists(client, home, cwd string) []mcpServerList {
	servers := []string{"mcpServers"}
	switch client {
	case "claude-code": // local, project, then user scope
		claude := filepath.Join(cmp.Or(os.Getenv("CLAUDE_CONFIG_DIR"), home), ".claude.json")
		return []mcpServerList{{claude, []string{"projects", cwd, "mcpServers"}}, {filepath.Join(cwd, ".mcp.json"), servers}, {claude, servers}}
	case "gemini":
		return []mcpServerList{{filepath.Join(cwd, ".gemini", "settings.json"), servers}, {filepath.Join(home, ".gemini", "settings.json"), servers}}
	case "cursor":
		return []mcpServerList{{filepath.Join(cwd, ".cursor", "mcp.json"), servers}, {filepath.Join(home, ".cursor", "mcp.json"), servers}}
	case "vscode": // vscode-docs docs/agents/reference/mcp-configuration.md: "servers"
		return []mcpServerList{{filepath.Join(cwd, ".vscode", "mcp.json"), []string{"servers"}}}
	case "antigravity": // both global paths are documented (see hookInstallTargets)
		return []mcpServerList{{filepath.Join(cwd, ".agents", "mcp_config.json"), servers},
			{filepath.Join(home, ".gemini", "config", "mcp_config.json"), servers}, {filepath.Join(home, ".gemini", "antigravity-cli", "mcp_config.json"), servers}}
	}
	return nil
}

// mcpGroupsDir returns the CROSSTALK_GROUPS_DIR that a server entry of the
// client's MCP configuration sets, the first in the file, expanded as the
// client does, and its file. A file that is missing or not JSON (comments
// and trailing commas allowed, as VS Code's mcp.json has them) is passed over.
func mcpGroupsDir(client, home, cwd string) (dir, file string) {
	for _, l := range mcpServerLists(client, home, cwd) {
		raw, err := os.ReadFile(l.file)
		if err != nil {
			continue
		}
		servers, _ := parseJSONSpans(string(raw)) // nil when it is not JSON
		for _, k := range l.keys {
			servers = servers.member(k)
		}
		if servers == nil || servers.kind != '{' {
			continue
		}
		for _, entry := range servers.vals {
			if d := entry.member("env").member("CROSSTALK_GROUPS_DIR"); d != nil && d.kind == '"' && d.str != "" {
				return os.Expand(d.str, func(v string) string { return expandVariable(v, home, cwd) }), l.file
			}
		}
	}
	return "", ""
}

// linkOnPath returns the name on PATH that runs the file exe, else exe. On
// Linux os.Executable resolves links, and the hooks would name the versioned
// file behind a package manager's link (Homebrew, Nix), which an upgrade
// removes.
func linkOnPath(exe string) string {
	p, err := exec.LookPath(filepath.Base(exe))
	if onPath, serr := os.Stat(p); err == nil && serr == nil && filepath.IsAbs(p) {
		if self, serr := os.Stat(exe); serr == nil && os.SameFile(onPath, self) {
			return p
		}
	}
	return exe
}

// expandVariable is os.Expand's lookup for the variables of the clients'
// MCP configurations: Claude Code's "VAR" and "VAR:-default", VS Code's and
// Cursor's "env:VAR", "userHome" and "workspaceFolder", the project cwd.
func expandVariable(name, home, cwd string) string {
	if v, ok := map[string]string{"userHome": home, "workspaceFolder": cwd}[name]; ok {
		return v
	}
	name, def, _ := strings.Cut(strings.TrimPrefix(name, "env:"), ":-")
	return cmp.Or(os.Getenv(name), def)
}

// readBackup returns the content of a regular file at name, or nil: any
// other backup is no evidence of what install found.
func readBackup(name string) *string {
	if info, err := os.Lstat(name); err != nil || !info.Mode().IsRegular() {
		return nil
	}
	if b, err := os.ReadFile(name); err == nil {
		return new(string(b))
	}
	return nil
}

// lineDiff shows the changed lines between old and new, without the
// unchanged lines around them.
func lineDiff(path, old, new string) string {
	a, b := strings.SplitAfter(old, "\n"), strings.SplitAfter(new, "\n")
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s (after)\n@@ line %d @@\n", path, path, pre+1)
	for _, l := range a[pre : len(a)-suf] {
		out.WriteString("-" + strings.TrimSuffix(l, "\n") + "\n")
	}
	for _, l := range b[pre : len(b)-suf] {
		out.WriteString("+" + strings.TrimSuffix(l, "\n") + "\n")
	}
	return out.String()
}
