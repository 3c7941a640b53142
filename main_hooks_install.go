package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// hooksInstallCommand is one `crosstalk-mcp hooks install|uninstall` run.
type hooksInstallCommand struct {
	install bool
	target  hookSettings
	scope   string
	dryRun  bool
}

const hooksHelp = `usage: crosstalk-mcp hooks install|uninstall --client NAME [--scope user|project] [--dry-run]

Add Crosstalk's hooks to a client's settings file, or remove them, leaving every
other byte as it was; each write keeps the previous file as FILE.crosstalk-backup.
When nothing else has changed since install, uninstall puts back the very bytes
install found (and removes the file install created).

options:
  --client NAME    claude-code, codex, gemini, vscode or cursor
  --scope SCOPE    user (the file in your home directory; the default) or
                   project (the file in the current directory)
  --dry-run        print the change without writing it
`

// runHooksInstall runs `hooks install` and `hooks uninstall`: it installs or
// removes Crosstalk's hooks in a client's settings file idempotently,
// leaving every other byte as it was, with a backup of the old file;
// --dry-run prints the change instead.
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
	err := parseFlags(fs, args[1:])
	target, ok := hookInstallTargets[*client]
	switch {
	case err != nil:
	case !ok:
		err = fmt.Errorf("--client must be one of %s", strings.Join(hookClientNames(), ", "))
	case *scope != "user" && *scope != "project":
		err = fmt.Errorf("--scope must be user or project, not %q", *scope)
	case target.settingsFile(*scope) == "":
		err = fmt.Errorf("%s hooks have no %s scope; VS Code also reads ~/.claude/settings.json, so use --client claude-code for every workspace", *client, *scope)
	}
	if err != nil {
		return commandExit(name, hooksHelp, err, stdout, stderr)
	}
	cmd := hooksInstallCommand{install: args[0] == "install", target: target, scope: *scope, dryRun: *dryRun}
	if err := cmd.run(stdout); err != nil {
		fmt.Fprintf(stderr, "crosstalk-mcp %s: %v\n", name, err)
		return 1
	}
	return 0
}

// run edits the settings file the command names (installHooks and
// uninstallHooks in routing_hooks_install.go do the editing) and reports
// what it did on stdout.
func (c hooksInstallCommand) run(stdout io.Writer) error {
	home, err := os.UserHomeDir()
	if err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
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
		text, err = installHooks(c.target, text, exe)
		if err != nil {
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
	remove = remove && target == path // a link the user made stays, and so does its file
	switch {
	case c.dryRun && remove:
		fmt.Fprintf(stdout, "%s: would be removed, as only Crosstalk's hooks are in it\n", path)
	case c.dryRun:
		fmt.Fprint(stdout, lineDiff(path, string(old), text))
	case remove:
		if err := os.Remove(path); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Crosstalk hooks removed with %s, which install had created\n", path)
	default:
		backup, err := writeSettings(path, target, mode, old, existed, text)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		verb := "removed from"
		if c.install {
			verb = "installed in"
		}
		fmt.Fprintf(stdout, "Crosstalk hooks %s %s", verb, path)
		if backup != "" {
			fmt.Fprintf(stdout, " (previous file kept as %s)", backup)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// readBackup returns the content of a regular file at name, or nil: a
// backup that is missing, unreadable or not a plain file is no evidence of
// what install found.
func readBackup(name string) *string {
	if info, err := os.Lstat(name); err != nil || !info.Mode().IsRegular() {
		return nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	s := string(b)
	return &s
}

// lineDiff shows the changed lines between old and new: the unchanged
// lines around them are left out.
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
